package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"sync"
	"testing"
)

// countingDriver is a database/sql driver that records what groupStmts
// asks of it: prepares, executions of prepared statements, and text
// executions. prepareErr, when set, fails every Prepare; execErr every
// execution.
type countingDriver struct {
	mu                         sync.Mutex
	prepares, stmtExecs, texts []string
	prepareErr, execErr        error
}

func (d *countingDriver) Open(string) (driver.Conn, error) { return &countingConn{d: d}, nil }

func (d *countingDriver) record(list *[]string, q string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	*list = append(*list, q)
}

func (d *countingDriver) counts() (prepares, stmtExecs, texts int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.prepares), len(d.stmtExecs), len(d.texts)
}

type countingConn struct{ d *countingDriver }

func (c *countingConn) Prepare(q string) (driver.Stmt, error) {
	if c.d.prepareErr != nil {
		return nil, c.d.prepareErr
	}
	c.d.record(&c.d.prepares, q)
	return &countingStmt{d: c.d, q: q}, nil
}
func (c *countingConn) Close() error              { return nil }
func (c *countingConn) Begin() (driver.Tx, error) { return nil, errors.New("no transactions") }
func (c *countingConn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	c.d.record(&c.d.texts, q)
	return driver.RowsAffected(1), c.d.execErr
}

type countingStmt struct {
	d *countingDriver
	q string
}

func (s *countingStmt) Close() error  { return nil }
func (s *countingStmt) NumInput() int { return -1 }
func (s *countingStmt) Exec([]driver.Value) (driver.Result, error) {
	s.d.record(&s.d.stmtExecs, s.q)
	return driver.RowsAffected(1), s.d.execErr
}
func (s *countingStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("no queries")
}

var driverSeq struct {
	sync.Mutex
	n int
}

// countingDB opens a pool on a fresh countingDriver.
func countingDB(t *testing.T) (*sql.DB, *countingDriver) {
	t.Helper()
	d := &countingDriver{}
	driverSeq.Lock()
	driverSeq.n++
	name := "counting-" + strconv.Itoa(driverSeq.n)
	driverSeq.Unlock()
	sql.Register(name, d)
	db, err := sql.Open(name, "")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one connection: each statement is prepared once
	t.Cleanup(func() { _ = db.Close() })
	return db, d
}

func rowsQuery(n int) string { return "INSERT " + strconv.Itoa(n) }

func TestGroupStmtsPrepareOncePerRowCountAndReuse(t *testing.T) {
	db, d := countingDB(t)
	g := newGroupStmts(db, true, rowsQuery)
	ctx := context.Background()
	for _, n := range []int{3, 3, 5, 3, 5} {
		if err := g.exec(ctx, nil, n, make([]any, n)); err != nil {
			t.Fatalf("exec %d rows: %v", n, err)
		}
	}
	prepares, stmtExecs, texts := d.counts()
	if prepares != 2 || stmtExecs != 5 || texts != 0 {
		t.Fatalf("prepares %d, prepared executions %d, text executions %d; want 2, 5, 0", prepares, stmtExecs, texts)
	}
	if got := d.prepares; got[0] != "INSERT 3" || got[1] != "INSERT 5" {
		t.Fatalf("prepared %q, want the 3- and 5-row statements", got)
	}
}

func TestGroupStmtsRunAsTextWhenPrepareIsRefused(t *testing.T) {
	db, d := countingDB(t)
	d.prepareErr = errors.New("Error 1461: Can't create more than max_prepared_stmt_count statements")
	g := newGroupStmts(db, true, rowsQuery)
	if err := g.exec(context.Background(), nil, 4, make([]any, 4)); err != nil {
		t.Fatalf("exec with prepare refused: %v", err)
	}
	if _, stmtExecs, texts := d.counts(); stmtExecs != 0 || texts != 1 || d.texts[0] != "INSERT 4" {
		t.Fatalf("prepared executions %d, text executions %q; want the statement once as text", stmtExecs, d.texts)
	}
	// The outcome of the text statement is the caller's.
	d.execErr = errors.New("Error 1062: Duplicate entry")
	if err := g.exec(context.Background(), nil, 4, make([]any, 4)); err == nil || err.Error() != d.execErr.Error() {
		t.Fatalf("exec error %v, want the database's %v", err, d.execErr)
	}
}

func TestGroupStmtsTextWhenOffTooLargeOrClosed(t *testing.T) {
	ctx := context.Background()
	t.Run("not MySQL", func(t *testing.T) {
		db, d := countingDB(t)
		if err := newGroupStmts(db, false, rowsQuery).exec(ctx, nil, 2, make([]any, 2)); err != nil {
			t.Fatal(err)
		}
		if p, s, x := d.counts(); p != 0 || s != 0 || x != 1 {
			t.Fatalf("prepares %d, prepared %d, text %d; want 0, 0, 1", p, s, x)
		}
	})
	t.Run("larger than preparedMaxRows", func(t *testing.T) {
		db, d := countingDB(t)
		n := preparedMaxRows + 1
		if err := newGroupStmts(db, true, rowsQuery).exec(ctx, nil, n, make([]any, n)); err != nil {
			t.Fatal(err)
		}
		if p, s, x := d.counts(); p != 0 || s != 0 || x != 1 {
			t.Fatalf("prepares %d, prepared %d, text %d; want 0, 0, 1", p, s, x)
		}
	})
	t.Run("closed", func(t *testing.T) {
		db, d := countingDB(t)
		g := newGroupStmts(db, true, rowsQuery)
		if err := g.exec(ctx, nil, 2, make([]any, 2)); err != nil {
			t.Fatal(err)
		}
		g.close()
		if err := g.exec(ctx, nil, 2, make([]any, 2)); err != nil {
			t.Fatal(err)
		}
		if p, s, x := d.counts(); p != 1 || s != 1 || x != 1 {
			t.Fatalf("prepares %d, prepared %d, text %d; want 1, 1, 1 (text after close)", p, s, x)
		}
	})
}

// TestGroupCommitUsesPreparedStatementsOnMySQL: the ledger's group commits
// run as prepared statements on MySQL (one per row count), and what they
// write reads back as written.
func TestGroupCommitUsesPreparedStatementsOnMySQL(t *testing.T) {
	s := MustMySQL(t)
	ctx := testCtx(t)
	rec := usingRec("prepared-1", 7)
	mustInsert(t, s, rec)
	s.insertStmts.mu.Lock()
	_, prepared := s.insertStmts.stmts[1]
	s.insertStmts.mu.Unlock()
	if !prepared {
		t.Fatal("the 1-row insert is not a prepared statement")
	}
	got, err := s.Session(ctx, rec.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if got.GrantedAmount != rec.GrantedAmount || got.ResourceName != rec.ResourceName || got.Status != "USING" {
		t.Fatalf("read back %+v, want the inserted %+v", got, rec)
	}
}
