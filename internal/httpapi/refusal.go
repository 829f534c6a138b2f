package httpapi

import (
	"context"
	"strconv"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// lineAdvice is what a refusal on a business line tells its caller, by
// reason and tier (issue 21 §3), with what the line could be granted now
// (lineRemaining; nil when not known): CORE lines are refused above their
// watermark only for non-critical work, so critical work passes; on GROWTH
// and EXPLORE lines a continuation of running work passes (ApplyRequest's
// NonCritical and Continuation); a line refused for more than it may still
// get is told how much that is; a refusal because the resource itself is
// used up (EXHAUSTED: its limit less what every line holds, plus grants)
// says that no tier or kind of work passes until the reset or a grant.
func lineAdvice(reason quota.RefusalReason, tier string, lineRemaining *int64) string {
	switch reason {
	case quota.RefusedExhausted:
		who := "no tier or kind of work passes"
		if tier == string(pools.TierCore) {
			who = "even a CORE line's critical work and continuations are refused"
		}
		only := ""
		if lineRemaining != nil && *lineRemaining > 0 {
			only = "the line may be granted only " + strconv.FormatInt(*lineRemaining, 10) + " more now: ask for at most " +
				"that (or give minAmount); otherwise "
		}
		return "the resource itself is used up in this period (its limit less what every line holds, plus grants), " +
			"so " + who + ": " + only + "retry after the reset, or ask an operator for a grant or a higher limit"
	case quota.RefusedWatermark:
		if tier == string(pools.TierCore) {
			return "the CORE line is above its watermark, where non-critical work is refused: critical work still passes"
		}
		return "the " + tier + " line is above its watermark: retry later, mark continuations of running work as such " +
			"(they still pass), or ask an operator for a grant"
	case quota.RefusedLineExhausted:
		if lineRemaining != nil && *lineRemaining > 0 {
			return "the line may be granted only " + strconv.FormatInt(*lineRemaining, 10) + " more now (dedicated part, " +
				"borrowing limit, buffer lent, grants): ask for at most that (or give minAmount), or ask an operator " +
				"for a grant or a buffer release for it"
		}
		return "the line has used all it may use (dedicated part, borrowing limit, buffer lent, grants): " +
			"ask an operator for a grant or a buffer release for it"
	case quota.RefusedPoolExhausted:
		return "the shared pool is used up and the line may not borrow more now: retry later, or ask an operator for a grant"
	}
	return ""
}

// lineRefusal completes a refused apply on a business line, whatever its
// reason (the resource's own exhaustion, EXHAUSTED, too): the period's
// remaining as status answers it (grants included) is read, and the
// message gives what the line could be granted now (the apply script's
// answer, lineRemaining in the body) and the tier's advice. A failed read
// leaves the answer's remaining as it was.
// It returns the answer and its message ("" for a refusal not on a line:
// writeRefused's own).
func (s *Server) lineRefusal(ctx context.Context, req quota.ApplyRequest, res quota.ApplyResponse, tier string) (quota.ApplyResponse, string) {
	if res.Refusal == nil || req.BusinessLine == "" {
		return res, ""
	}
	if st, err := s.svc.Status(ctx, req.ResourceName); err == nil {
		res.Remaining = st.Remaining
	}
	line := ""
	// LINE_EXHAUSTED's advice gives the figure, EXHAUSTED's when it is not 0.
	gives := res.Refusal.Reason == quota.RefusedLineExhausted ||
		(res.Refusal.Reason == quota.RefusedExhausted && res.LineRemaining != nil && *res.LineRemaining > 0)
	if res.LineRemaining != nil && !gives {
		line = "; the line could be granted " + strconv.FormatInt(*res.LineRemaining, 10) + " now"
	}
	return res, "quota exhausted on business line " + strconv.Quote(req.BusinessLine) + ": " +
		lineAdvice(res.Refusal.Reason, tier, res.LineRemaining) + line +
		"; " + strconv.FormatInt(res.Remaining, 10) + " remaining in this period for the resource"
}
