package quota

import (
	"context"
	"errors"
	"testing"
	"time"
)

// deadlineStubs is an Options.InsertSessionBefore, as *mysqlstore.Store
// has it: it records the deadline and context of each insert and answers
// err.
type deadlineStubs struct {
	*stubs
	deadlines []time.Time
	ctxs      []context.Context
	rows      []UsageRecord
	err       error
}

func (d *deadlineStubs) InsertSessionBefore(ctx context.Context, deadline time.Time, rec UsageRecord) error {
	d.count("InsertSessionBefore")
	d.deadlines, d.ctxs, d.rows = append(d.deadlines, deadline), append(d.ctxs, ctx), append(d.rows, rec)
	return d.err
}

// TestApplyInsertsWithTheLedgersOwnDeadline: with an insert that takes a
// deadline (Options.InsertSessionBefore), an apply's row is written through it,
// with the deadline LedgerTimeout from now and the request's own context
// (no derived one), and never through InsertSession; when that insert
// fails with the deadline's error, the apply fails with it and its
// reservation is given back, as with a derived context's.
func TestApplyInsertsWithTheLedgersOwnDeadline(t *testing.T) {
	st := &stubs{}
	d := &deadlineStubs{stubs: st}
	const timeout = 1500 * time.Millisecond
	svc := NewService(st, st, st, daySched{}, Options{Now: func() time.Time { return testEpoch.Add(time.Hour) }, LedgerTimeout: timeout,
		InsertSessionBefore: d.InsertSessionBefore})
	ctx := context.Background()
	before := time.Now()
	res, err := svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, ClientID: "c1", SessionID: "s-1"})
	after := time.Now()
	if err != nil || res.Granted != 5 {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	if len(d.deadlines) != 1 || st.n("InsertSession") != 0 {
		t.Fatalf("%d InsertSessionBefore, %d InsertSession; want 1 and 0", len(d.deadlines), st.n("InsertSession"))
	}
	if dl := d.deadlines[0]; dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)) {
		t.Fatalf("deadline %v, want LedgerTimeout (%v) from the call, within [%v, %v]", dl, timeout, before.Add(timeout), after.Add(timeout))
	}
	if _, has := d.ctxs[0].Deadline(); has || d.ctxs[0] != ctx {
		t.Fatalf("insert context %v: want the request's own, without a derived deadline", d.ctxs[0])
	}
	if row := d.rows[0]; row.SessionID != "s-1" || row.GrantedAmount != 5 || row.Status != StatusUsing || row.ClientID != "c1" {
		t.Fatalf("row %+v", row)
	}

	// The deadline passed before the row was sent: the error, given back.
	d.err = context.DeadlineExceeded
	st.session = func(string) (UsageRecord, error) { return UsageRecord{}, ErrSessionNotFound } // the read-back finds no row
	_, err = svc.Apply(ctx, ApplyRequest{ResourceName: "r", Amount: 5, ClientID: "c1", SessionID: "s-2"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("apply with the insert past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if st.n("Cancel") != 1 {
		t.Fatalf("%d give-backs, want 1", st.n("Cancel"))
	}
}
