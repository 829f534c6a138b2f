package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxChargeItems bounds the items of one Charge (an Envoy request carries a
// few descriptors; more is a misconfigured gateway).
const MaxChargeItems = 64

// ChargeItem is one amount to charge to one resource, in the policy's unit.
type ChargeItem struct {
	ResourceName string
	// Amount is 0 … 2^53−1. 0 charges nothing and checks that something
	// is left (a gateway's check on the request of a token budget).
	Amount int64
	// Force: the usage already happened (a gateway's charge on the response,
	// a shadow mapping): never refused; what goes past the limit is overage,
	// as a finish's actual usage past its grant is.
	Force bool
}

// ChargeRequest charges several resources at once: all of it or nothing.
type ChargeRequest struct {
	Items    []ChargeItem // 1 … MaxChargeItems
	ClientID string       // optional, as ApplyRequest.ClientID
}

// ChargeItemResult is what a Charge did to one item's resource. Amounts are
// in the policy's unit.
type ChargeItemResult struct {
	ResourceName string
	QuotaType    QuotaType
	Limit        int64
	// Remaining is what is left of the period after the request (negative
	// past the limit); for a refused request, what was left before it. −1
	// when FailOpen (unknown).
	Remaining int64
	// Exceeded: the item did not fit (less than Amount remained, or nothing
	// for Amount 0). A non-Force item that Exceeded refused the request; a
	// Force one was charged all the same.
	Exceeded bool
	// Overage is the part of a Force item charged past the limit.
	Overage int64
	// Period is the period charged (or checked); its End is when it resets.
	Period Period
	// PeriodLength is the length of a full period of the policy (the next
	// one's; 0 when it never resets): the first period, from the policy's
	// creation or a reset, is shorter.
	PeriodLength time.Duration
	// Checked: the balance store decided on the item. False for the items
	// of a refused request that were not reached (Limit is the policy's,
	// Remaining −1), and with FailOpen.
	Checked bool
}

// ChargeResponse is the answer to a Charge: per item, in request order.
type ChargeResponse struct {
	Items []ChargeItemResult
	// Refused: a non-Force item did not fit, so nothing was charged.
	Refused bool
	// FailOpen: the stores could not decide and every policy involved is
	// failMode OPEN, so the request is let through; FailOpenCause is the
	// backend error and FailOpenRecorded whether the ledger has the charge
	// (reconciliation then puts it in the live balance).
	FailOpen         bool
	FailOpenRecorded bool
	FailOpenCause    error
}

// chargeGroup is the part of a request that falls on one resource: the
// items of a resource are charged together, so two descriptors that map to
// one resource must fit together.
type chargeGroup struct {
	pol   Policy
	admit int64 // sum of the non-Force amounts; what must fit
	check bool  // there is a non-Force item (admit may be 0: a check)
	total int64 // everything charged: admit + the Force amounts
	res   ChargeResult
	done  bool // charged in the balance store (to be undone on refusal)
}

// need is ChargeCmd.Need of the group.
func (g *chargeGroup) need() int64 {
	if !g.check {
		return -1
	}
	return g.admit
}

func (r ChargeRequest) validate() error {
	if len(r.Items) == 0 {
		return invalid("items", "at least one item (descriptor) is required")
	}
	if len(r.Items) > MaxChargeItems {
		return invalid("items", fmt.Sprintf("at most %d items (descriptors) per request", MaxChargeItems))
	}
	for _, it := range r.Items {
		if err := ValidateResourceName(it.ResourceName); err != nil {
			return err
		}
		if err := ValidateAmount("amount", it.Amount, true); err != nil {
			return err
		}
	}
	if r.ClientID != "" {
		return ValidateClientID(r.ClientID)
	}
	return nil
}

// Charge charges each item's amount to its resource in one step per
// resource, with no session left open: an apply and a finish at once (what a
// gateway speaking Envoy's rate limit protocol needs). It is all or nothing:
// if a non-Force item does not fit, the resources already charged are given
// back and nothing stays charged (Refused). Resources may live in different
// Redis Cluster slots, so each is charged by its own script and a refusal
// undoes the earlier ones: a concurrent request may see the undone amount
// as used for that instant (it is refused, never granted more).
//
// Each charged resource gets one FINISHED ledger row (a charge: granted =
// charged = amount, overage past the limit), written for the request in
// one statement (a ledger may merge it with the rows of concurrent
// requests of the same client, resource and period: mysqlstore sums
// them); seeding and reconciliation count it like any finished session.
// If the ledger cannot be written, the charges are given back and
// the request fails, or fails open when every policy involved is OPEN.
//
// Errors: *ValidationError (also a resource with business lines or
// grants: the gateway charges plain resources), ErrResourceNotFound,
// ErrUnavailable / ErrCircuitOpen (fail-closed; nothing stays charged, but
// an undo that failed too is left to reconciliation, which corrects the
// balance from the ledger: an over-count until then, never an under-count).
func (s *Service) Charge(ctx context.Context, req ChargeRequest) (ChargeResponse, error) {
	if err := req.validate(); err != nil {
		return ChargeResponse{}, err
	}
	if s.opt.Charges.Balances == nil || s.opt.Charges.Ledger == nil {
		return ChargeResponse{}, errors.New("charge: no charge stores configured (Options.Charges)")
	}
	groups, order, err := s.chargeGroups(ctx, req)
	if err != nil {
		return ChargeResponse{}, err
	}
	resp, err := s.chargeAll(ctx, groups, order)
	if err == nil && !resp.Refused {
		err = s.recordCharges(ctx, req.ClientID, groups, order)
	}
	if err != nil {
		s.undoCharges(groups, order)
		if allOpen(groups) && isBackendFailure(err) {
			return s.chargeFailOpen(ctx, req, groups, order, err), nil
		}
		return ChargeResponse{}, err
	}
	resp.Items = itemResults(req, groups, resp.Refused)
	return resp, nil
}

// chargeGroups reads the policies and sums the items per resource; order
// lists the resources with something to refuse first (so that a refusal
// has as little as possible to undo), then the Force-only ones.
func (s *Service) chargeGroups(ctx context.Context, req ChargeRequest) (map[string]*chargeGroup, []string, error) {
	groups := make(map[string]*chargeGroup, len(req.Items))
	var admits, forced []string
	for _, it := range req.Items {
		g := groups[it.ResourceName]
		if g == nil {
			pol, err := s.Policy(ctx, it.ResourceName)
			if err != nil {
				return nil, nil, err
			}
			if err := s.plainResource(ctx, pol); err != nil {
				return nil, nil, err
			}
			g = &chargeGroup{pol: pol}
			groups[it.ResourceName] = g
		}
		if g.total > MaxAmount-it.Amount {
			return nil, nil, invalid("amount", "the amounts charged to "+it.ResourceName+" add up past 2^53-1")
		}
		g.total += it.Amount
		if !it.Force {
			g.admit += it.Amount
			g.check = true
		}
	}
	listed := make(map[string]bool, len(groups))
	for _, it := range req.Items {
		if listed[it.ResourceName] {
			continue
		}
		listed[it.ResourceName] = true
		if groups[it.ResourceName].check {
			admits = append(admits, it.ResourceName)
		} else {
			forced = append(forced, it.ResourceName)
		}
	}
	return groups, append(admits, forced...), nil
}

// plainResource refuses a resource with business lines or grants: a
// charge draws from the resource's own balance only.
func (s *Service) plainResource(ctx context.Context, pol Policy) error {
	use, err := s.policies.poolsOf(ctx, pol.ResourceName)
	if err != nil {
		return fmt.Errorf("charge %s: pools: %w", pol.ResourceName, err)
	}
	if len(use.Lines) > 0 || use.Grants {
		return invalid("resourceName", pol.ResourceName+" has business lines or temporary grants: charge it with /quota/apply instead")
	}
	return nil
}

// chargeAll charges the groups in order; on the first refusal it gives the
// earlier ones back and answers Refused.
func (s *Service) chargeAll(ctx context.Context, groups map[string]*chargeGroup, order []string) (ChargeResponse, error) {
	for _, r := range order {
		g := groups[r]
		res, err := s.chargeOne(ctx, g.pol, g.total, g.need())
		if err != nil {
			return ChargeResponse{}, err
		}
		g.res = res
		if res.Outcome == ChargeRefused {
			s.undoCharges(groups, order)
			return ChargeResponse{Refused: true}, nil
		}
		g.done = true
	}
	return ChargeResponse{}, nil
}

// chargeOne runs the balance store's charge across period roll-over and
// seeding, as apply does.
func (s *Service) chargeOne(ctx context.Context, pol Policy, amount, need int64) (ChargeResult, error) {
	per, err := s.policies.periodAt(pol, s.opt.Now())
	if err != nil {
		return ChargeResult{}, fmt.Errorf("charge %s: %w", pol.ResourceName, err)
	}
	for range maxAttempts {
		cmd := ChargeCmd{ResourceName: pol.ResourceName, Amount: amount, Need: need, Period: per, FirstPeriod: isFirstPeriod(pol, per)}
		res, err := Guard(s.redisFor(pol.ResourceName), func() (ChargeResult, error) { return s.opt.Charges.Balances.Charge(ctx, cmd) })
		if err != nil {
			return ChargeResult{}, fmt.Errorf("charge %s: %w", pol.ResourceName, err)
		}
		switch res.Outcome {
		case ChargeWrongPeriod:
			if per, err = s.sched.PeriodAt(pol, res.Now); err != nil {
				return ChargeResult{}, fmt.Errorf("charge %s: %w", pol.ResourceName, err)
			}
			continue
		case ChargeNeedBalance:
			if err := s.seed(ctx, pol, per); err != nil {
				return ChargeResult{}, fmt.Errorf("charge %s: %w", pol.ResourceName, err)
			}
			continue
		case ChargeCharged, ChargeRefused:
			res.Period = per
			res.PeriodLength = s.periodLength(pol, per)
			return res, nil
		}
		return ChargeResult{}, fmt.Errorf("charge %s: unknown store outcome %d", pol.ResourceName, res.Outcome)
	}
	return ChargeResult{}, fmt.Errorf("charge %s: period or balance kept changing: %w", pol.ResourceName, ErrUnavailable)
}

// periodLength is the length of the period after per (0 when per never
// ends or the next one cannot be computed). It is remembered per resource
// for the policy and period it was computed for: computing it walks the
// reset cron (robfig/cron's Next, ~7 % of quota-center's CPU per gateway
// request before, measured with pprof under scripts/bench-gateway.sh).
func (s *Service) periodLength(pol Policy, per Period) time.Duration {
	if per.End.IsZero() {
		return 0
	}
	if d, ok := s.lengths.get(pol, per); ok {
		return d
	}
	d := time.Duration(0)
	if next, err := s.sched.PeriodAt(pol, per.End); err == nil && !next.End.IsZero() {
		d = next.End.Sub(next.Start)
	}
	s.lengths.put(pol, per, d)
	return d
}

// periodLengths remembers, per resource, the length of the period after
// the last period a charge fell in (Service.periodLength). The zero value
// is empty and ready; it holds one entry per resource charged.
type periodLengths struct {
	mu sync.Mutex
	m  map[string]periodLength
}

// periodLength is one remembered length: of the period after per, under pol.
type periodLength struct {
	pol Policy
	per Period
	d   time.Duration
}

func (l *periodLengths) get(pol Policy, per Period) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[pol.ResourceName]
	if !ok || e.pol != pol || !e.per.Start.Equal(per.Start) || !e.per.End.Equal(per.End) {
		return 0, false
	}
	return e.d, true
}

func (l *periodLengths) put(pol Policy, per Period, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]periodLength{}
	}
	l.m[pol.ResourceName] = periodLength{pol: pol, per: per, d: d}
}

// undoCharges gives back what chargeAll charged (a refusal, or a ledger
// that could not be written). It runs on its own deadline: the request's
// context may be the reason. An undo that fails leaves the balance
// over-counted until reconciliation corrects it from the ledger.
func (s *Service) undoCharges(groups map[string]*chargeGroup, order []string) {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	for _, r := range order {
		g := groups[r]
		if !g.done || g.total == 0 {
			g.done = false
			continue
		}
		g.done = false
		_ = GuardErr(s.redisFor(r), func() error {
			return s.opt.Charges.Balances.Uncharge(ctx, r, g.res.Period, g.total)
		})
	}
}

// chargeRecords are the ledger rows of the groups charged (amount > 0).
func (s *Service) chargeRecords(clientID string, groups map[string]*chargeGroup, order []string, at time.Time) []UsageRecord {
	var recs []UsageRecord
	for _, r := range order {
		g := groups[r]
		if g.total == 0 {
			continue
		}
		if !g.res.Now.IsZero() {
			at = g.res.Now
		}
		recs = append(recs, UsageRecord{
			ResourceName: r, ClientID: clientID, SessionID: s.opt.NewSessionID(),
			PeriodStart: g.res.Period.Start, ApplyAmount: g.total, GrantedAmount: g.total,
			ChargedAmount: g.total, OverageAmount: g.res.Overage, StartTime: at, EndTime: at,
			Status: StatusFinished,
		})
	}
	return recs
}

// recordCharges writes the request's ledger rows in one statement. If the
// outcome is unknown (the connection died after the commit), it reads the
// first row back before reporting a failure.
func (s *Service) recordCharges(ctx context.Context, clientID string, groups map[string]*chargeGroup, order []string) error {
	recs := s.chargeRecords(clientID, groups, order, s.opt.Now().UTC().Truncate(time.Millisecond))
	if len(recs) == 0 {
		return nil
	}
	err := GuardErr(s.mysql, func() error { return s.opt.Charges.Ledger.InsertCharges(ctx, recs) })
	if err == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if row, rerr := s.session(lctx, recs[0].SessionID); rerr == nil && row.Status == StatusFinished {
		return nil
	}
	return fmt.Errorf("charge: record: %w", err)
}

// chargeFailOpen lets a request of OPEN policies through while the stores
// cannot decide. The charges are written to the ledger if MySQL answers
// (reconciliation then puts them in the live balance, and a rebuild counts
// them), so the usage is lost only if MySQL is down too.
func (s *Service) chargeFailOpen(ctx context.Context, req ChargeRequest, groups map[string]*chargeGroup, order []string, cause error) ChargeResponse {
	now := s.opt.Now().UTC().Truncate(time.Millisecond)
	for _, g := range groups {
		per, err := s.policies.periodAt(g.pol, now)
		if err != nil {
			per = Period{Start: now}
		}
		g.res = ChargeResult{Period: per}
	}
	recs := s.chargeRecords(req.ClientID, groups, order, now)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	recorded := len(recs) == 0 ||
		GuardErr(s.mysql, func() error { return s.opt.Charges.Ledger.InsertCharges(lctx, recs) }) == nil
	items := make([]ChargeItemResult, len(req.Items))
	for i, it := range req.Items {
		g := groups[it.ResourceName]
		items[i] = ChargeItemResult{ResourceName: it.ResourceName, QuotaType: g.pol.QuotaType,
			Limit: g.pol.TotalLimit, Remaining: -1, Period: g.res.Period}
	}
	return ChargeResponse{Items: items, FailOpen: true, FailOpenRecorded: recorded, FailOpenCause: cause}
}

// allOpen reports whether every policy of the request fails open.
func allOpen(groups map[string]*chargeGroup) bool {
	for _, g := range groups {
		if g.pol.FailMode != FailOpen {
			return false
		}
	}
	return true
}

// itemResults answers each item from its group's store result. In a
// refused request the groups charged before the refusal were given back:
// they answer what remained before; groups not reached answer Checked
// false.
func itemResults(req ChargeRequest, groups map[string]*chargeGroup, refused bool) []ChargeItemResult {
	items := make([]ChargeItemResult, len(req.Items))
	for i, it := range req.Items {
		g := groups[it.ResourceName]
		r := ChargeItemResult{
			ResourceName: it.ResourceName, QuotaType: g.pol.QuotaType,
			Limit: g.res.Limit, Remaining: g.res.Remaining, Period: g.res.Period, PeriodLength: g.res.PeriodLength,
		}
		switch g.res.Outcome {
		case ChargeRefused:
			r.Checked, r.Exceeded = true, true
		case ChargeCharged:
			before := g.res.Remaining + g.total
			r.Checked = true
			r.Exceeded = before < g.total || (g.total == 0 && before <= 0)
			if refused {
				r.Remaining = before
			} else if it.Force {
				r.Overage = g.res.Overage
			}
		default:
			r.Limit, r.Remaining = g.pol.TotalLimit, -1
		}
		items[i] = r
	}
	return items
}
