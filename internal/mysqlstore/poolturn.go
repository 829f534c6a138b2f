package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/quotacenter/quota-center/internal/pools"
)

// InPoolsTurn calls write with a resource's limit, pool settings and lines
// as stored, in the resource's turn: on MySQL in a transaction that first
// locks the policy row (the lock ChangePools and UpdatePolicyLocked take)
// and is rolled back after write returns, so that what write puts in Redis
// lands in the order of the changes and is the stored state's when it does
// (a change waits for the lock, and writes Redis after). On SQLite, whose
// one connection write may need, the state is read first and write runs
// after, under this Store's per-resource lock that ChangePools also holds:
// the same order within the one process SQLite serves. Within a process
// the turns of one resource queue on that lock first, on MySQL too. State.Grants is
// left empty; write may read the database. found false: the resource has
// no policy (write not called). Errors: quota.ErrUnavailable; write's.
func (s *Store) InPoolsTurn(ctx context.Context, resource string, write func(pools.State) error) (found bool, err error) {
	// One turn per resource at a time in this process: each waits for the
	// row's lock holding one connection, and the holder's write may need
	// another (a burst of applies in turn must not take the whole pool).
	defer s.localTurn(resource)()
	if s.dialect.name != dialectMySQL.name {
		st, found, err := s.ReadPoolsLocked(ctx, resource)
		if err != nil || !found {
			return found, err
		}
		return true, write(st)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	op := "pools turn " + resource
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return false, translate(op, err)
	}
	defer func() { _ = tx.Rollback() }() // writes nothing here
	var st pools.State
	err = tx.GetContext(ctx, &st.Limit, `SELECT total_limit FROM quota_policy WHERE resource_name = ?`+
		s.dialect.lifecycle.lockRow, resource)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, translate(op, err)
	}
	if st.Settings, _, err = readPoolSettings(ctx, tx, resource); err != nil {
		return true, translate(op, err)
	}
	if st.Lines, err = readLines(ctx, tx, resource); err != nil {
		return true, translate(op, err)
	}
	return true, write(st)
}

// sqliteTurn takes this Store's lock of resource on SQLite and returns its
// release (a no-op on MySQL, where the policy row's lock orders changes).
func (s *Store) sqliteTurn(resource string) func() {
	if s.dialect.name == dialectMySQL.name {
		return func() {}
	}
	return s.localTurn(resource)
}

// localTurn takes this Store's lock of resource and returns its release.
func (s *Store) localTurn(resource string) func() {
	m, _ := s.turns.LoadOrStore(resource, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}
