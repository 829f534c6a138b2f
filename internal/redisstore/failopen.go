package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The sessions a failMode OPEN policy kept while MySQL was unreachable
// (docs/design.md §8): flagged here, their ledger rows written later by
// reconciliation.

// MarkFailOpen runs failopen.lua. See quota.BalanceStore.
func (s *Store) MarkFailOpen(ctx context.Context, resource, sessionID string) error {
	v, err := s.run(ctx, failOpenScript, []string{sessionKey(resource, sessionID), failOpenKey(resource)}, sessionID)
	if err != nil {
		return wrap("mark fail-open", err)
	}
	c, err := flag("failopen.lua", v, failOpenNoSession, failOpenFlagged)
	if err != nil {
		return wrap("mark fail-open", err)
	}
	if c == failOpenNoSession {
		return fmt.Errorf("mark fail-open %s: %w", sessionID, quota.ErrSessionNotFound)
	}
	return nil
}

// FailOpenSessions lists the sessions flagged by MarkFailOpen whose ledger
// rows are not yet written (qc:{r}:failopen).
func (s *Store) FailOpenSessions(ctx context.Context, resource string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, failOpenKey(resource)).Result()
	return ids, wrap("fail-open sessions", err)
}

// AckFailOpen forgets flagged sessions whose ledger rows are written.
func (s *Store) AckFailOpen(ctx context.Context, resource string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	return wrap("ack fail-open", s.rdb.SRem(ctx, failOpenKey(resource), members...).Err())
}

// ScopeFailOpen runs failopen_scope.lua: it moves the flagged session of
// client stored under id to the scoped id (quota.ScopedSessionID), its
// lease, fail-open flag and sweep acknowledgement with it, so that its
// ledger row can be written under the scoped id while id's row is another
// session's. It reports whether the session is now stored under scoped:
// false (nothing changed) when the session under id is gone, not flagged
// or not client's, or a live session holds scoped already.
func (s *Store) ScopeFailOpen(ctx context.Context, resource, id, scoped, client string) (bool, error) {
	v, err := s.run(ctx, failOpenScopeScript, []string{sessionKey(resource, id), sessionKey(resource, scoped),
		leasesKey(resource), failOpenKey(resource), leakedKey(resource)}, id, scoped, client)
	if err != nil {
		return false, wrap("scope fail-open", err)
	}
	c, err := flag("failopen_scope.lua", v, failOpenScopeNone, failOpenScopeMoved, failOpenScopeTaken)
	if err != nil {
		return false, wrap("scope fail-open", err)
	}
	return c == failOpenScopeMoved, nil
}

// parseFailOpenDraw decodes failopen.lua's 'fod' ("dd|ds|db|dg|gl") of a
// session on line ("" = none: db is then the base, drawn from the limit).
func parseFailOpenDraw(fod, line string) (*quota.PoolSplit, error) {
	f := strings.SplitN(fod, "|", 5)
	if len(f) != 5 {
		return nil, fmt.Errorf("fail-open draw %q: want 5 fields", fod)
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("fail-open draw %q: %w", fod, err)
		}
		n[i] = v
	}
	d := quota.PoolSplit{Dedicated: n[0], Shared: n[1], Buffer: n[2], Grant: n[3], Grants: f[4]}
	if line == "" {
		d.Base, d.Buffer = d.Buffer, 0
	}
	return &d, nil
}
