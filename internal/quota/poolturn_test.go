package quota

import (
	"context"
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/pools"
)

// An apply on a line the instance's cached copy still has but Redis and
// the policy store no longer do (a DELETE overtook the cache) is the
// caller's error, a 400 naming businessLine, with no layout written back;
// on main it wrote the layout and retried until it answered 503 "period or
// balance kept changing" (docs/pools.md §5, finding 5).
func TestAnApplyOnALineDeletedMeanwhileIsAValidationError(t *testing.T) {
	ctx := context.Background()
	st := &stubs{apply: func(c ApplyCmd) (ApplyResult, error) {
		return ApplyResult{Outcome: ApplyGranted, Granted: c.Amount, PeriodStart: c.Period.Start}, nil
	}}
	src := &poolStub{lines: twoLines}
	svc := newStubService(st, pooled(st, src, Options{}))
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "lab"}); err != nil {
		t.Fatal(err) // the lines are cached now
	}
	src.lines = twoLines[:1] // "lab" deleted
	st.apply = func(ApplyCmd) (ApplyResult, error) { return ApplyResult{}, pools.ErrUnknownLine }
	layouts := st.n("SetPoolLayout")
	_, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "lab"})
	if ve := (*ValidationError)(nil); !errors.As(err, &ve) || ve.Field != "businessLine" {
		t.Fatalf("apply on a deleted line: %v, want a ValidationError naming businessLine", err)
	}
	if st.n("SetPoolLayout") != layouts {
		t.Fatalf("%d layouts written for a line that is gone", st.n("SetPoolLayout")-layouts)
	}
	// The cached copy was dropped: the next apply is refused up front.
	if _, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, BusinessLine: "lab"}); !errors.As(err, new(*ValidationError)) || st.n("Apply") != 2 {
		t.Fatalf("next apply: %v after %d store applies, want refused before the store", err, st.n("Apply"))
	}
}
