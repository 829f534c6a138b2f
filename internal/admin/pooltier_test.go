package admin_test

import (
	"context"
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// failingJournal is the policy store whose next RecordPoolEvents fails.
type failingJournal struct {
	*mysqlstore.Store
	fail bool
}

func (f *failingJournal) RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error {
	if f.fail {
		f.fail = false
		return errors.New("journal write failed")
	}
	return f.Store.RecordPoolEvents(ctx, resource, evs)
}

// TestATierChangeIsJournalledWithTheLine: a line's tier change sets its
// watermark to the new tier's, and its WATERMARK_TIER event is what a
// rebuild after Redis loss restores it from. The event used to be written
// after the line's commit: when that write failed the operator got an
// error, a retry of the same tier changed nothing and journalled nothing,
// and a rebuild restored the old tier's watermark (the controller's last).
// Now the event is written in the line's transaction: after a failing
// journal write and a retry, a rebuild from MySQL gives the new tier's.
func TestATierChangeIsJournalledWithTheLine(t *testing.T) {
	w := testenv.NewPoolWorld(t, pools.ElasticityOff)
	// The controller raised a's watermark while it was GROWTH.
	if err := w.DB.RecordPoolEvents(w.Ctx, "llm", []pools.Event{{AtMs: w.Clock.UnixMilli(), Kind: "WATERMARK_RAISED", Line: "a", Amount: 7777}}); err != nil {
		t.Fatal(err)
	}
	store := &failingJournal{Store: w.DB, fail: true}
	q := w.Quota(quota.Breakers{})
	a := admin.NewPools(store, w.RS, q, w, w.Now)
	core := pools.LineSpec{Name: "a", Tier: pools.TierCore, Weight: 1}
	_, _, err := a.PutLine(w.Ctx, "llm", core)
	t.Logf("tier change with a failing journal write: %v", err)
	if _, _, err := a.PutLine(w.Ctx, "llm", core); err != nil {
		t.Fatalf("retry: %v", err)
	}
	cfg, err := a.Config(w.Ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	w.MR.Del("qc:{llm}:pl") // Redis loses the layout
	if err := q.WritePoolLayout(w.Ctx, "llm", cfg.Layout); err != nil {
		t.Fatal(err)
	}
	if got, want := w.Model(t).Lines["a"].Watermark, pools.TierCore.BaseWatermark(); got != want {
		t.Fatalf("after the rebuild a's watermark is %d bp, want CORE's %d (the tier change journalled)", got, want)
	}
}
