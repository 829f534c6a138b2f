package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// MaxUsageGroups bounds the groups of one usage answer (the rest is cut and
// Truncated set).
const MaxUsageGroups = 1000

// MaxUsageSpan bounds to − from of a usage query per grouping: an hourly
// series of at most 31 days (744 points), daily and per-client sums of at
// most 400 days (per business line too).
var MaxUsageSpan = map[string]time.Duration{
	quota.GroupByHour:   31 * 24 * time.Hour,
	quota.GroupByDay:    400 * 24 * time.Hour,
	quota.GroupByClient: 400 * 24 * time.Hour,
	quota.GroupByLine:   400 * 24 * time.Hour,
}

// DefaultUsageSpan is the span of a usage query that gives no from.
const DefaultUsageSpan = 24 * time.Hour

// UsageQuery asks GET /admin/usage: the sessions of Resource that started
// in [From, To), grouped by GroupBy (client, line, hour or day; hours and
// days in UTC; sessions of no business line form the line ""). Zero To is
// now; zero From is To − 24 h; "" GroupBy is hour.
type UsageQuery struct {
	Resource string
	From, To time.Time
	GroupBy  string
}

// Usage is the answer: the policy (for its unit), the effective range and
// the groups in key order.
type Usage struct {
	Policy    quota.Policy
	From, To  time.Time
	GroupBy   string
	Groups    []quota.UsageGroup
	Truncated bool
}

// Usage sums the ledger per group.
//
// Errors: *quota.ValidationError (unknown groupBy, from not before to, a
// span over MaxUsageSpan), quota.ErrResourceNotFound, quota.ErrUnavailable.
func (s *Service) Usage(ctx context.Context, q UsageQuery) (Usage, error) {
	if err := quota.ValidateResourceName(q.Resource); err != nil {
		return Usage{}, err
	}
	if q.GroupBy == "" {
		q.GroupBy = quota.GroupByHour
	}
	span, ok := MaxUsageSpan[q.GroupBy]
	if !ok {
		return Usage{}, &quota.ValidationError{Field: "groupBy", Reason: "must be client, line, hour or day"}
	}
	if q.To.IsZero() {
		q.To = s.now()
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-DefaultUsageSpan)
	}
	if !q.From.Before(q.To) {
		return Usage{}, &quota.ValidationError{Field: "from", Reason: "must be before to"}
	}
	if q.To.Sub(q.From) > span {
		return Usage{}, &quota.ValidationError{Field: "to",
			Reason: fmt.Sprintf("to − from must be at most %d days with groupBy=%s", int(span.Hours()/24), q.GroupBy)}
	}
	pol, err := s.d.Quota.Policy(ctx, q.Resource)
	if err != nil {
		return Usage{}, err
	}
	res, err := s.d.Ledger.Usage(ctx, quota.UsageQuery{
		Resource: q.Resource, From: q.From, To: q.To, GroupBy: q.GroupBy, MaxGroups: MaxUsageGroups,
	})
	if err != nil {
		return Usage{}, err
	}
	return Usage{Policy: pol, From: q.From.UTC(), To: q.To.UTC(), GroupBy: q.GroupBy, Groups: res.Groups, Truncated: res.Truncated}, nil
}
