package mysqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// preparedMaxRows is the largest group whose statement is prepared; larger
// groups (rare: only when BatchMaxRows is raised past it and the load fills
// them) are sent as text, as every other statement of the store is.
const preparedMaxRows = 128

// groupStmts runs one group-commit statement shape (an INSERT or UPDATE
// whose text depends only on its row count) as server-side prepared
// statements on MySQL, one per row count, prepared on first use and kept
// until Close.
//
// Why: a text statement (the driver interpolates the placeholders, see
// Open) is parsed by the server every time, and its values travel as SQL
// literals; an executed prepared statement skips the parse and sends the
// values in the binary protocol. For the 10-row ledger INSERT that MariaDB
// spent ~27 µs of CPU per row on as text, ~23.5 µs as a prepared statement
// (docs/performance-notes.md). It is still one round trip per statement:
// database/sql prepares it once on each connection that runs it (again on
// a new connection after one broke) and executes it there.
//
// On SQLite, and when the server refuses to prepare (max_prepared_stmt_count
// reached, say), the statement runs as text, with the same outcome.
type groupStmts struct {
	db    *sql.DB
	on    bool               // MySQL: prepare; else always text
	query func(n int) string // the statement's text for n rows

	mu     sync.Mutex
	stmts  map[int]*sql.Stmt
	closed bool
}

func newGroupStmts(db *sql.DB, prepare bool, query func(n int) string) *groupStmts {
	return &groupStmts{db: db, on: prepare, query: query, stmts: map[int]*sql.Stmt{}}
}

// exec runs the statement for n rows with args (all rows' values, in
// order), in tx when tx is not nil (else on its own, autocommitted).
// Errors: the database's, as ExecContext returns them.
func (g *groupStmts) exec(ctx context.Context, tx *sql.Tx, n int, args []any) error {
	st := g.stmt(ctx, n)
	var err error
	switch {
	case st != nil && tx != nil:
		// Runs the statement prepared on tx's connection (database/sql
		// prepares it there once and keeps it with st).
		_, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	case st != nil:
		_, err = st.ExecContext(ctx, args...)
	case tx != nil:
		_, err = tx.ExecContext(ctx, g.query(n), args...)
	default:
		_, err = g.db.ExecContext(ctx, g.query(n), args...)
	}
	return err
}

// stmt returns the prepared statement for n rows, preparing it now if
// needed; nil when the statement runs as text (see groupStmts).
func (g *groupStmts) stmt(ctx context.Context, n int) *sql.Stmt {
	if !g.on || n > preparedMaxRows {
		return nil
	}
	g.mu.Lock()
	st, closed := g.stmts[n], g.closed
	g.mu.Unlock()
	if st != nil || closed {
		return st
	}
	st, err := g.db.PrepareContext(ctx, g.query(n))
	if err != nil {
		// Run it as text: if the server is down that fails the same way, and
		// if it only refused to prepare, the statement still runs.
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if prev := g.stmts[n]; prev != nil || g.closed {
		_ = st.Close()
		return prev
	}
	g.stmts[n] = st
	return st
}

// close closes every prepared statement; later calls run as text (the
// store's batchers are stopped before it is called).
func (g *groupStmts) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for n, st := range g.stmts {
		_ = st.Close()
		delete(g.stmts, n)
	}
}
