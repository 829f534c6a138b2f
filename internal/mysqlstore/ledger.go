package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

type usageRow struct {
	ResourceName   string        `db:"resource_name"`
	ClientID       string        `db:"client_id"`
	SessionID      string        `db:"session_id"`
	PeriodStartMs  int64         `db:"period_start_ms"`
	ApplyAmount    int64         `db:"apply_amount"`
	MinAmount      int64         `db:"min_amount"`
	GrantedAmount  int64         `db:"granted_amount"`
	ChargedAmount  int64         `db:"charged_amount"`
	RefundedAmount int64         `db:"refunded_amount"`
	OverageAmount  int64         `db:"overage_amount"`
	StartMs        int64         `db:"start_ms"`
	EndMs          sql.NullInt64 `db:"end_ms"`
	Status         string        `db:"status"`
	LeakRecovered  bool          `db:"leak_recovered"`
	BusinessLine   string        `db:"business_line"`
	DrawnDedicated int64         `db:"drawn_dedicated"`
	DrawnShared    int64         `db:"drawn_shared"`
	DrawnBuffer    int64         `db:"drawn_buffer"`
	DrawnGrant     int64         `db:"drawn_grant"`
	DrawnGrants    string        `db:"drawn_grants"`
}

func (r usageRow) record() quota.UsageRecord {
	rec := quota.UsageRecord{
		ResourceName:   r.ResourceName,
		ClientID:       r.ClientID,
		SessionID:      r.SessionID,
		PeriodStart:    timeOf(r.PeriodStartMs),
		ApplyAmount:    r.ApplyAmount,
		MinAmount:      r.MinAmount,
		GrantedAmount:  r.GrantedAmount,
		ChargedAmount:  r.ChargedAmount,
		RefundedAmount: r.RefundedAmount,
		OverageAmount:  r.OverageAmount,
		StartTime:      timeOf(r.StartMs),
		Status:         quota.Status(r.Status),
		LeakRecovered:  r.LeakRecovered,
		BusinessLine:   r.BusinessLine,
		Drawn: quota.PoolSplit{Dedicated: r.DrawnDedicated, Shared: r.DrawnShared, Buffer: r.DrawnBuffer,
			Grant: r.DrawnGrant, Grants: r.DrawnGrants},
	}
	if r.BusinessLine == "" {
		// A resource without lines: drawn_buffer holds what came from its limit.
		rec.Drawn.Base, rec.Drawn.Buffer = rec.Drawn.Buffer, 0
	}
	if r.EndMs.Valid {
		rec.EndTime = timeOf(r.EndMs.Int64)
	}
	return rec
}

// InsertSession durably writes a new USING ledger row for rec: its resource,
// client, session id, period start, apply, min and granted amounts and start
// time (times truncated to the millisecond). charged_amount is set to
// GrantedAmount (the reservation); rec's Status, ChargedAmount,
// RefundedAmount, OverageAmount, EndTime and LeakRecovered are ignored.
//
// Concurrent calls are group-committed into one multi-row INSERT (see
// Options.BatchMaxRows and BatchMaxWait); the call returns once its own row
// is committed. If ctx is done before the row is sent, it returns ctx's error
// and the row is not written; once sent, it waits for the outcome.
//
// A row that may start below the ledger lifecycle's watermark (a
// fail-open session recorded by reconciliation) is written by
// InsertLateSession instead (lateinsert.go).
//
// Errors: one wrapping quota.ErrDuplicateSession when the session id is
// already in the ledger (the existing row is unchanged), quota.ErrUnavailable
// when the database cannot be reached or the store is closed.
func (s *Store) InsertSession(ctx context.Context, rec quota.UsageRecord) error {
	return s.inserts.do(ctx, rec)
}

// InsertSessionBefore is InsertSession with a deadline of the caller's own
// besides ctx's (quota.Options.InsertSessionBefore): if deadline passes before
// the row is sent, it returns an error wrapping context.DeadlineExceeded
// and the row is not written; once sent, it waits for the outcome. It
// costs no derived context (quota.Service's Options.LedgerTimeout per
// apply). A zero deadline is none. Errors: InsertSession's.
func (s *Store) InsertSessionBefore(ctx context.Context, deadline time.Time, rec quota.UsageRecord) error {
	return s.inserts.doBefore(ctx, deadline, rec)
}

// insertColumns and insertValues are one row of the group-commit INSERT.
const (
	insertColumns = `INSERT INTO quota_usage (resource_name, client_id, session_id, period_start_ms,
	apply_amount, min_amount, granted_amount, charged_amount, start_ms, status,
	business_line, drawn_dedicated, drawn_shared, drawn_buffer, drawn_grant, drawn_grants) VALUES `
	insertValues = `(?, ?, ?, ?, ?, ?, ?, ?, ?, 'USING', ?, ?, ?, ?, ?, ?)`
)

// insertSQL is the group-commit INSERT of n rows.
func insertSQL(n int) string {
	var b strings.Builder
	b.Grow(len(insertColumns) + n*(len(insertValues)+2))
	b.WriteString(insertColumns)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(insertValues)
	}
	return b.String()
}

// insertRows writes recs with one INSERT statement (s.insertStmts): all of
// them or none.
func (s *Store) insertRows(ctx context.Context, recs []quota.UsageRecord) error {
	return s.insertStmts.exec(ctx, nil, len(recs), insertArgs(recs))
}

// insertArgs are the arguments of insertSQL(len(recs)).
func insertArgs(recs []quota.UsageRecord) []any {
	args := make([]any, 0, len(recs)*15)
	for _, r := range recs {
		args = append(args, r.ResourceName, r.ClientID, r.SessionID, msOf(r.PeriodStart),
			r.ApplyAmount, r.MinAmount, r.GrantedAmount, r.GrantedAmount, msOf(r.StartTime),
			r.BusinessLine, r.Drawn.Dedicated, r.Drawn.Shared, r.Drawn.Buffer+r.Drawn.Base, r.Drawn.Grant, r.Drawn.Grants)
	}
	return args
}

// FinishSession settles the USING or LEAKED row of rec.SessionID on
// rec.ResourceName of client rec.ClientID: status FINISHED, charged_amount =
// rec.ChargedAmount (the actual usage, overage included), refunded and
// overage amounts and end time from rec. A LEAKED row (or rec.LeakRecovered)
// sets leak_recovered. A FINISHED or missing row, or the id's row of
// another resource or client, is left as it is, without error: a fail-open
// session whose bare id is another session's row has no row of its own
// yet, and reconciliation writes it (internal/reconcile failopen.go).
//
// Concurrent calls are group-committed like InsertSession: gathered into one
// multi-row UPDATE (bounded by Options.BatchMaxRows and BatchMaxWait), and
// the call returns once the statement that settles its row is committed. Two
// finishes of one session in the same batch settle it once, with the values
// of the first; the second is then a no-op, as it would be after it. If ctx
// is done before the update is sent, it returns ctx's error and the row is
// not touched; once sent, it waits for the outcome.
//
// Errors: one wrapping quota.ErrUnavailable when the database cannot be
// reached or the store is closed.
func (s *Store) FinishSession(ctx context.Context, rec quota.UsageRecord) error {
	return s.finishes.do(ctx, rec)
}

// finishRows settles the rows of recs with one UPDATE statement (all of
// them or none), or, when recs hold one session id for several resources
// or clients, one statement per such record after the first (finishRounds;
// a retry of them is harmless: a FINISHED row is left alone). A session
// (id, resource, client) repeated in recs is settled with its first
// record. Each column is a CASE over session_id, one WHEN per session, so
// the statement is the same on MySQL and SQLite, and the WHERE clause keeps
// FINISHED (and missing) rows, and another resource's or client's row of
// the id, out exactly as the one-row form does.
//
// leak_recovered is assigned before status: MySQL evaluates SET left to
// right with the new values (SQLite with the old ones; either way it sees
// the status before this update).
func (s *Store) finishRows(ctx context.Context, recs []quota.UsageRecord) error {
	return s.execFinish(ctx, nil, recs)
}

// execFinish runs finishRows' statements for recs, in tx when not nil.
func (s *Store) execFinish(ctx context.Context, tx *sql.Tx, recs []quota.UsageRecord) error {
	for _, round := range finishRounds(recs) {
		n, args := finishArgs(round)
		if err := s.finishStmts.exec(ctx, tx, n, args); err != nil {
			return err
		}
	}
	return nil
}

// finishRounds splits recs into groups without a repeated session id: the
// first record of each (session id, resource, client) in order, a record
// whose id an earlier one of another resource or client has going to the
// next group. Almost always one group (recs itself when nothing repeats).
func finishRounds(recs []quota.UsageRecord) [][]quota.UsageRecord {
	first := recs
	if len(recs) > 1 {
		first = firstPerSession(recs)
	}
	if len(first) == len(recs) {
		return [][]quota.UsageRecord{recs}
	}
	type key struct{ id, resource, client string }
	seen := make(map[key]struct{}, len(recs))
	per := make(map[string]int, len(recs))
	var rounds [][]quota.UsageRecord
	for _, r := range recs {
		k := key{r.SessionID, r.ResourceName, r.ClientID}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		i := per[r.SessionID]
		per[r.SessionID] = i + 1
		if i == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[i] = append(rounds[i], r)
	}
	return rounds
}

// finishArgs are the sessions n of finishRows' statement (finishSQL(n)) for
// recs, whose session ids are distinct (finishRounds), and its arguments.
func finishArgs(recs []quota.UsageRecord) (n int, args []any) {
	n = len(recs)
	args = make([]any, 0, n*14)
	for _, r := range recs {
		args = append(args, r.SessionID, r.LeakRecovered)
	}
	for _, r := range recs {
		args = append(args, r.SessionID, r.ChargedAmount)
	}
	for _, r := range recs {
		args = append(args, r.SessionID, r.RefundedAmount)
	}
	for _, r := range recs {
		args = append(args, r.SessionID, r.OverageAmount)
	}
	for _, r := range recs {
		args = append(args, r.SessionID, nullMsOf(r.EndTime))
	}
	for _, r := range recs {
		args = append(args, r.SessionID)
	}
	for _, r := range recs {
		args = append(args, r.SessionID, r.ResourceName, r.ClientID)
	}
	return n, args
}

// finishSQL is the group-commit UPDATE of finishRows for n sessions; its
// arguments are, for each CASE in order, a session id and its value, one
// pair per session, then the n session ids of the IN list, then for each
// session its id, resource and client: the row of the id is settled only
// when it is that resource's and client's.
func finishSQL(n int) string {
	var b strings.Builder
	b.Grow(256 + n*(5*len(" WHEN ? THEN ?")+len(", ?")+len(finishOwner)))
	column := func(prefix string) {
		b.WriteString(prefix)
		b.WriteString("CASE session_id")
		b.WriteString(strings.Repeat(" WHEN ? THEN ?", n))
		b.WriteString(" END")
	}
	column("UPDATE quota_usage SET leak_recovered = CASE WHEN status = 'LEAKED' THEN 1 ELSE ")
	b.WriteString(" END, status = 'FINISHED'")
	column(", charged_amount = ")
	column(", refunded_amount = ")
	column(", overage_amount = ")
	column(", end_ms = ")
	b.WriteString(" WHERE status IN ('USING', 'LEAKED') AND session_id IN (?")
	b.WriteString(strings.Repeat(", ?", n-1))
	b.WriteString(") AND CASE session_id")
	b.WriteString(strings.Repeat(finishOwner, n))
	b.WriteString(" ELSE 0 END")
	return b.String()
}

// finishOwner is one session's WHEN of finishSQL's owner check.
const finishOwner = " WHEN ? THEN (resource_name = ? AND client_id = ?)"

// firstPerSession returns recs without the records whose session id an
// earlier record has (recs itself when there are none).
func firstPerSession(recs []quota.UsageRecord) []quota.UsageRecord {
	seen := make(map[string]struct{}, len(recs))
	var out []quota.UsageRecord
	for i, r := range recs {
		if _, dup := seen[r.SessionID]; dup {
			if out == nil {
				out = append(make([]quota.UsageRecord, 0, len(recs)-1), recs[:i]...)
			}
			continue
		}
		seen[r.SessionID] = struct{}{}
		if out != nil {
			out = append(out, r)
		}
	}
	if out == nil {
		return recs
	}
	return out
}

// markLeakedChunk bounds the sessions of one MarkLeaked statement. Its
// CASEs are linear in it for every row (the end time, and the row's
// resource and client), so a statement costs its square: 100, not the
// 500 of before the owner check, which took over 2 s on SQLite under -race.
const markLeakedChunk = 100

// MarkLeaked moves the USING rows of leaks to LEAKED, charging their grant
// (charged_amount = granted_amount) and setting end_ms to each EndTime. A
// row is matched by session id, resource and client (any client for a leak
// whose ClientID is "", swept before it was reported): the id's row of
// another resource or client, like rows that are not USING, is left as it
// is (a fail-open session without a row of its own yet: reconciliation
// writes it). Up to 100 sessions are updated by
// one statement; it is idempotent, so a retry after a partial failure is
// safe. Errors: one wrapping quota.ErrUnavailable when the database cannot
// be reached.
func (s *Store) MarkLeaked(ctx context.Context, leaks []quota.LeakedSession) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	for len(leaks) > 0 {
		chunk := leaks[:min(len(leaks), markLeakedChunk)]
		leaks = leaks[len(chunk):]

		var b strings.Builder
		b.WriteString(`UPDATE quota_usage SET status = 'LEAKED', charged_amount = granted_amount, end_ms = CASE session_id`)
		args := make([]any, 0, 7*len(chunk))
		for _, l := range chunk {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, l.SessionID, nullMsOf(l.EndTime))
		}
		b.WriteString(" END WHERE status = 'USING' AND session_id IN (?")
		b.WriteString(strings.Repeat(", ?", len(chunk)-1))
		b.WriteString(") AND CASE session_id")
		for _, l := range chunk {
			args = append(args, l.SessionID)
		}
		for _, l := range chunk {
			b.WriteString(" WHEN ? THEN (resource_name = ? AND (? = '' OR client_id = ?))")
			args = append(args, l.SessionID, l.ResourceName, l.ClientID, l.ClientID)
		}
		b.WriteString(" ELSE 0 END")
		if _, err := s.db.ExecContext(ctx, b.String(), args...); err != nil {
			return translate(fmt.Sprintf("mark %d sessions leaked", len(chunk)), err)
		}
	}
	return nil
}

// Session reads the ledger row of sessionID. Times are UTC at millisecond
// precision; EndTime is zero while USING. Errors: one wrapping
// quota.ErrSessionNotFound when there is no such row, quota.ErrUnavailable
// when the database cannot be reached.
func (s *Store) Session(ctx context.Context, sessionID string) (quota.UsageRecord, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var r usageRow
	err := s.db.GetContext(ctx, &r, selectUsage+`WHERE session_id = ?`, sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return quota.UsageRecord{}, fmt.Errorf("get session %s: %w", sessionID, quota.ErrSessionNotFound)
	}
	if err != nil {
		return quota.UsageRecord{}, translate("get session "+sessionID, err)
	}
	return r.record(), nil
}

// selectUsage reads every column of usageRow; append the WHERE clause.
const selectUsage = `SELECT resource_name, client_id, session_id, period_start_ms,
	apply_amount, min_amount, granted_amount, charged_amount, refunded_amount, overage_amount,
	start_ms, end_ms, status, leak_recovered,
	business_line, drawn_dedicated, drawn_shared, drawn_buffer, drawn_grant, drawn_grants
	FROM quota_usage `

// OpenSessionsPage returns at most limit USING rows of resource with an id
// above after, in id order, and the id of the last one (after itself when
// there is none): keyset pages over idx_quota_usage_open, whose entries are
// ordered by id within (status, resource_name), so each page costs the same
// however far the walk has gone. Errors: one wrapping quota.ErrUnavailable
// when the database cannot be reached.
func (s *Store) OpenSessionsPage(ctx context.Context, resource string, after int64, limit int) ([]quota.UsageRecord, int64, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var rows []struct {
		ID int64 `db:"id"`
		usageRow
	}
	q := `SELECT id, ` + strings.TrimPrefix(selectUsage, "SELECT ") +
		`WHERE status = 'USING' AND resource_name = ? AND id > ? ORDER BY id LIMIT ?`
	if err := s.db.SelectContext(ctx, &rows, q, resource, after, limit); err != nil {
		return nil, after, translate("open sessions "+resource, err)
	}
	out := make([]quota.UsageRecord, len(rows))
	for i, r := range rows {
		out[i] = r.record()
		after = r.ID
	}
	return out, after, nil
}

// PeriodTotals sums the ledger rows of resource in the period starting at
// periodStart (matched to the millisecond): Reserved is the charged_amount
// (= grant) of USING rows, Charged the charged_amount of FINISHED and LEAKED
// rows, in the policy's unit; rows rolled up by the ledger's lifecycle
// count through their sums (periodTotalsSQL), whether or not they were
// deleted since. A period without rows gives zero totals.
// Errors: one wrapping quota.ErrUnavailable when the database cannot be
// reached.
func (s *Store) PeriodTotals(ctx context.Context, resource string, periodStart time.Time) (quota.PeriodTotals, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	var t struct {
		Reserved int64 `db:"reserved"`
		Charged  int64 `db:"charged"`
	}
	err := s.db.GetContext(ctx, &t, s.periodTotalsSQL(), periodTotalsArgs(resource, periodStart)...)
	if err != nil {
		return quota.PeriodTotals{}, translate(fmt.Sprintf("period totals %s@%d", resource, msOf(periodStart)), err)
	}
	return quota.PeriodTotals{Charged: t.Charged, Reserved: t.Reserved}, nil
}

// periodTotalsSQL is the store's period totals statement (the dialect's
// periodTotals, built by periodTotalsQuery). Arguments: periodTotalsArgs.
func (s *Store) periodTotalsSQL() string { return s.dialect.periodTotals }

// periodTotalsQuery builds the period totals in one statement (one
// snapshot): the raw rows of the period that started at or after the
// resource's lifecycle watermark, plus the rolled-up sums of the period,
// which hold exactly the rows before it (lifecycle.go; a rolled-up row is
// settled, so it adds to charged only) but those listed in
// quota_usage_rollup_deferred, read raw (lifecycledeferred.go: LEAKED or
// CANCELLED rows that may still change; lateinsert.go: rows written late
// below the watermark, a USING one counted as reserved). hint(index) follows each table
// that must be read through that index, whatever the optimizer estimates
// (MySQL: FORCE INDEX; store.go, dialect.periodTotals): the ledger as a
// range of idx_quota_usage_period (resource_name, period_start_ms,
// start_ms) from the watermark, the rollups and the list by their
// (resource_name, period_start_ms) indexes, so that each reads the period's
// entries only (a period with none listed, as the current one mostly is,
// reads no listed row). An entry of the list counts only while its row starts where
// it was listed: a retried apply that revives the row moves its start (and
// period) to the retry's. Arguments: periodTotalsArgs.
func periodTotalsQuery(hint func(index string) string) string {
	deferred := `
		FROM quota_usage_rollup_deferred d` + hint("idx_quota_usage_rollup_deferred_period") + `
		JOIN quota_usage q ON q.id = d.id AND q.start_ms = d.start_ms
		WHERE d.resource_name = ? AND d.period_start_ms = ? AND q.start_ms < (` + rolledToSQL + `)`
	return `SELECT
	COALESCE(SUM(CASE WHEN status = 'USING' THEN charged_amount ELSE 0 END), 0)
		+ (SELECT COALESCE(SUM(CASE WHEN q.status = 'USING' THEN q.charged_amount ELSE 0 END), 0)` + deferred + `) AS reserved,
	COALESCE(SUM(CASE WHEN status IN ('FINISHED', 'LEAKED') THEN charged_amount ELSE 0 END), 0)
		+ (SELECT COALESCE(SUM(charged), 0) FROM quota_usage_rollup` + hint("idx_quota_usage_rollup_period") + `
			WHERE resource_name = ? AND period_start_ms = ?)
		+ (SELECT COALESCE(SUM(CASE WHEN q.status IN ('FINISHED', 'LEAKED') THEN q.charged_amount ELSE 0 END), 0)` + deferred + `) AS charged
	FROM quota_usage` + hint("idx_quota_usage_period") + `
	WHERE resource_name = ? AND period_start_ms = ? AND start_ms >= (` + rolledToSQL + `)`
}

// periodTotalsArgs are the arguments of periodTotalsSQL.
func periodTotalsArgs(resource string, periodStart time.Time) []any {
	p := msOf(periodStart)
	return []any{resource, p, resource, resource, p, resource, p, resource, resource, p, resource}
}
