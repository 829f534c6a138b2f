package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
)

// Bounds of a session listing.
const (
	DefaultSessionLimit = 100
	MaxSessionLimit     = 1000
	// maxScan bounds the entries one listing call examines when a clientId
	// or line filter drops some: a page may come back short, with a cursor.
	maxScan = 5000
)

// SessionQuery selects sessions of one resource (GET /admin/sessions).
type SessionQuery struct {
	Resource string
	ClientID string       // "": any
	Line     string       // business line (pools); "": any
	Status   quota.Status // "": USING first (Redis), then FINISHED and LEAKED (ledger)
	Limit    int          // 1 … MaxSessionLimit; 0 = DefaultSessionLimit
	Cursor   string       // "" = the first page
}

// Session is one row of the session map. Amounts are in the policy's unit.
// For a USING session LastHeartbeat is LeaseExpiresAt − leakThresholdSeconds
// (Redis keeps the lease, not the heartbeat) and Charged is 0; for FINISHED
// and LEAKED ones LeaseExpiresAt and LastHeartbeat are zero.
type Session struct {
	SessionID      string
	ResourceName   string
	ClientID       string
	BusinessLine   string // "" for a session without one
	Status         quota.Status
	Granted        int64
	Charged        int64
	Refunded       int64
	Overage        int64
	PeriodStart    time.Time
	StartTime      time.Time
	LastHeartbeat  time.Time
	LeaseExpiresAt time.Time
	EndTime        time.Time
	Age            time.Duration // start to now (USING) or to the end
	FailOpen       bool
	LeakRecovered  bool
}

// SessionPage is one page of sessions and the cursor of the next ("" at the
// end).
type SessionPage struct {
	Sessions   []Session
	NextCursor string
}

func (q *SessionQuery) validate() error {
	if err := quota.ValidateResourceName(q.Resource); err != nil {
		return err
	}
	if q.ClientID != "" {
		if err := quota.ValidateClientID(q.ClientID); err != nil {
			return err
		}
	}
	if q.Line != "" {
		if err := pools.ValidateLineName(q.Line); err != nil {
			return &quota.ValidationError{Field: "businessLine", Reason: "must be 1 to 64 characters of [a-z0-9_.-]"}
		}
	}
	switch q.Status {
	case "", quota.StatusUsing, quota.StatusFinished, quota.StatusLeaked:
	default:
		return &quota.ValidationError{Field: "status", Reason: "must be USING, FINISHED or LEAKED"}
	}
	if q.Limit == 0 {
		q.Limit = DefaultSessionLimit
	}
	if q.Limit < 1 || q.Limit > MaxSessionLimit {
		return &quota.ValidationError{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d", MaxSessionLimit)}
	}
	return nil
}

// Sessions lists the sessions of q.Resource, newest first: USING sessions
// from Redis's lease index (the latest lease first: a session just applied
// for or renewed is at the top), then FINISHED and LEAKED ones from the
// ledger (the latest started first). Each call examines at most
// max(limit, 5000) entries whatever the number of sessions; with a clientId
// or business-line filter a page may hold fewer than limit sessions and still have a
// NextCursor. The listing is live: a session renewed while you page may move
// above the cursor and be missed, one that finishes may show twice.
//
// Errors: *quota.ValidationError (also a bad cursor, which wraps
// ErrBadCursor), quota.ErrResourceNotFound, quota.ErrUnavailable.
func (s *Service) Sessions(ctx context.Context, q SessionQuery) (SessionPage, error) {
	if err := q.validate(); err != nil {
		return SessionPage{}, err
	}
	pol, err := s.d.Quota.Policy(ctx, q.Resource)
	if err != nil {
		return SessionPage{}, err
	}
	bind := cursor{Resource: q.Resource, Client: q.ClientID, Line: q.Line, Status: string(q.Status)}
	cur := bind
	cur.Phase = "live"
	if q.Status == quota.StatusFinished || q.Status == quota.StatusLeaked {
		cur.Phase = "hist"
	}
	if q.Cursor != "" {
		if cur, err = s.decodeCursor(ctx, q.Cursor, bind); err != nil {
			return SessionPage{}, err
		}
	}
	page := SessionPage{Sessions: []Session{}}
	if cur.Phase == "live" {
		exhausted, err := s.liveSessions(ctx, pol, q, &cur, &page, s.now())
		if err != nil {
			return SessionPage{}, err
		}
		switch {
		case !exhausted:
			return s.finishPage(ctx, page, cur)
		case q.Status == quota.StatusUsing:
			return page, nil
		}
		cur = cursor{Resource: cur.Resource, Client: cur.Client, Line: cur.Line, Status: cur.Status, Phase: "hist"}
		if len(page.Sessions) == q.Limit {
			return s.finishPage(ctx, page, cur)
		}
	}
	more, err := s.historySessions(ctx, q, &cur, &page)
	if err != nil || !more {
		return page, err
	}
	return s.finishPage(ctx, page, cur)
}

func (s *Service) finishPage(ctx context.Context, page SessionPage, cur cursor) (SessionPage, error) {
	c, err := s.encodeCursor(ctx, cur)
	if err != nil {
		return SessionPage{}, err
	}
	page.NextCursor = c
	return page, nil
}

// liveSessions fills page from the lease index; it reports whether the
// index is exhausted (false: cur is where the next page starts).
func (s *Service) liveSessions(ctx context.Context, pol quota.Policy, q SessionQuery, cur *cursor, page *SessionPage, now time.Time) (bool, error) {
	pos := quota.LivePos{LeaseMs: cur.LeaseMs, Skip: cur.Skip}
	chunk := q.Limit
	if q.ClientID != "" || q.Line != "" {
		chunk = max(q.Limit, 500)
	}
	for scanned := 0; len(page.Sessions) < q.Limit && scanned < max(q.Limit, maxScan); {
		got, next, more, err := s.d.Live.LiveSessions(ctx, q.Resource, pos, chunk)
		if err != nil {
			return false, err
		}
		scanned += chunk
		for _, ls := range got {
			if q.ClientID != "" && ls.ClientID != q.ClientID || q.Line != "" && ls.BusinessLine != q.Line {
				pos = ls.Pos
				continue
			}
			if len(page.Sessions) == q.Limit {
				cur.LeaseMs, cur.Skip = pos.LeaseMs, pos.Skip
				return false, nil
			}
			page.Sessions = append(page.Sessions, liveView(pol, ls, now))
			pos = ls.Pos
		}
		pos = next
		if !more {
			return true, nil
		}
	}
	cur.LeaseMs, cur.Skip = pos.LeaseMs, pos.Skip
	return false, nil
}

// historySessions fills the rest of page from the ledger; it reports whether rows may remain (cur is then the next start).
func (s *Service) historySessions(ctx context.Context, q SessionQuery, cur *cursor, page *SessionPage) (bool, error) {
	limit := q.Limit - len(page.Sessions)
	hq := quota.HistoryQuery{
		Resource: q.Resource, ClientID: q.ClientID, Line: q.Line, Statuses: []quota.Status{quota.StatusFinished, quota.StatusLeaked},
		Before: quota.HistoryPos{StartMs: cur.StartMs, ID: cur.ID}, Limit: limit, Scan: limit + 1,
	}
	if q.Status != "" || q.ClientID != "" || q.Line != "" {
		// A filter that may drop most rows: a wider window, still bounded.
		hq.Scan = max(limit+1, maxScan)
	}
	if q.Status != "" {
		hq.Statuses = []quota.Status{q.Status}
	}
	hp, err := s.d.Ledger.SessionHistory(ctx, hq)
	if err != nil {
		return false, err
	}
	for _, r := range hp.Rows {
		page.Sessions = append(page.Sessions, historyView(r.UsageRecord))
	}
	cur.StartMs, cur.ID = hp.Next.StartMs, hp.Next.ID
	return hp.More, nil
}

func liveView(pol quota.Policy, ls quota.LiveSession, now time.Time) Session {
	return Session{
		SessionID: quota.PublicSessionID(ls.SessionID), ResourceName: pol.ResourceName, ClientID: ls.ClientID, BusinessLine: ls.BusinessLine,
		Status:  quota.StatusUsing,
		Granted: ls.Granted, PeriodStart: ls.PeriodStart, StartTime: ls.StartTime,
		LastHeartbeat: ls.LeaseExpiresAt.Add(-pol.LeaseDuration()), LeaseExpiresAt: ls.LeaseExpiresAt,
		Age: max(0, now.Sub(ls.StartTime)), FailOpen: ls.FailOpen,
	}
}

func historyView(r quota.UsageRecord) Session {
	return Session{
		SessionID: quota.PublicSessionID(r.SessionID), ResourceName: r.ResourceName, ClientID: r.ClientID, BusinessLine: r.BusinessLine,
		Status:  r.Status,
		Granted: r.GrantedAmount, Charged: r.ChargedAmount, Refunded: r.RefundedAmount, Overage: r.OverageAmount,
		PeriodStart: r.PeriodStart, StartTime: r.StartTime, EndTime: r.EndTime,
		Age: max(0, r.EndTime.Sub(r.StartTime)), LeakRecovered: r.LeakRecovered,
	}
}
