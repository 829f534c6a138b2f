package quota

import (
	"context"
	"fmt"

	"github.com/quotacenter/quota-center/internal/pools"
)

// The spare buffer's moves into the shared pool (pools.Model.SpareToShared;
// apply.lua) are journalled as pool events (pools.SpareMove.Events) so that
// a rebuild after Redis loss (WritePoolLayout with PoolMoves) lends what
// Redis lent, not the moved buffer again (docs/pools.md §6). apply.lua
// notes each move in the layout hash in the same step as the move (field
// jq:<ref>) and answers it; the Service journals the answer's move before
// it writes the session's ledger row, then forgets the note. A note that
// outlives its apply (the process died, the reply was lost, MySQL did not
// answer) is journalled by the next drain: the controller's tick, an
// operator's void of a release, a layout that cut lent buffer back. The
// events carry the note's ref, so journalling a move twice stores it once.

// SpareNotes is the balance store's side of the moves' notes (redisstore).
type SpareNotes interface {
	// SpareMoves lists the notes not yet forgotten, in
	// pools.ParseSpareNote's form.
	SpareMoves(ctx context.Context, resource string) ([]string, error)
	// ForgetSpareMoves removes the notes of refs (journalled).
	ForgetSpareMoves(ctx context.Context, resource string, refs []string) error
}

// EventJournal appends pool events (mysqlstore.Store.RecordPoolEvents:
// an event whose Ref is stored already is not stored again).
type EventJournal interface {
	RecordPoolEvents(ctx context.Context, resource string, evs []pools.Event) error
}

// JournalSpareMoves journals the moves notes (pools.ParseSpareNote's form)
// of a resource at atMs (Unix ms) and then forgets their notes in the
// balance store. A malformed note is forgotten unjournalled (it cannot be
// read; the error says so after the others are done). Errors: the stores'
// (the notes stay, for the next drain).
func JournalSpareMoves(ctx context.Context, bal SpareNotes, jour EventJournal, resource string, atMs int64, notes []string) error {
	var evs []pools.Event
	var refs []string
	var bad error
	for _, n := range notes {
		m, err := pools.ParseSpareNote(n)
		if err != nil {
			bad = err
			continue
		}
		evs = append(evs, m.Events(atMs)...)
		refs = append(refs, m.Ref)
	}
	if err := jour.RecordPoolEvents(ctx, resource, evs); err != nil {
		return fmt.Errorf("journal spare moves of %s: %w", resource, err)
	}
	if err := bal.ForgetSpareMoves(ctx, resource, refs); err != nil {
		return err
	}
	return bad
}

// DrainSpareMoves journals every move of the spare buffer the balance
// store still notes for a resource (JournalSpareMoves). A writer of pool
// events calls it after its own move in Redis and before journalling it,
// so a move its own depends on (a void that found the buffer moved) is
// never missing from the journal while its own is there.
func DrainSpareMoves(ctx context.Context, bal SpareNotes, jour EventJournal, resource string, atMs int64) error {
	notes, err := bal.SpareMoves(ctx, resource)
	if err != nil || len(notes) == 0 {
		return err
	}
	return JournalSpareMoves(ctx, bal, jour, resource, atMs, notes)
}

// DrainSpareMoves is the package's DrainSpareMoves on the Service's
// stores, through their breakers (internal/admin calls it before a
// void's RETURN event). Errors: the stores' (ErrUnavailable,
// ErrCircuitOpen).
func (s *Service) DrainSpareMoves(ctx context.Context, resource string) error {
	if !s.pooled() {
		return nil
	}
	notes, err := Guard(s.redisFor(resource), func() ([]string, error) { return s.opt.Pools.Balances.SpareMoves(ctx, resource) })
	if err != nil || len(notes) == 0 {
		return err
	}
	return s.journalSpare(ctx, resource, notes)
}

// journalSpare journals notes through the breakers, on the ledger's
// deadline and whatever the request's context does: a move Redis made is
// journalled even when its caller gave up.
func (s *Service) journalSpare(ctx context.Context, resource string, notes []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opt.LedgerTimeout)
	defer cancel()
	at := s.opt.Now().UnixMilli()
	return GuardErr(s.mysql, func() error {
		return JournalSpareMoves(ctx, spareNotesVia{s, resource}, s.opt.Pools.Config, resource, at, notes)
	})
}

// spareNotesVia is the balance store's notes behind the resource's Redis
// breaker.
type spareNotesVia struct {
	s        *Service
	resource string
}

func (v spareNotesVia) SpareMoves(ctx context.Context, resource string) ([]string, error) {
	return Guard(v.s.redisFor(v.resource), func() ([]string, error) { return v.s.opt.Pools.Balances.SpareMoves(ctx, resource) })
}

func (v spareNotesVia) ForgetSpareMoves(ctx context.Context, resource string, refs []string) error {
	return GuardErr(v.s.redisFor(v.resource), func() error { return v.s.opt.Pools.Balances.ForgetSpareMoves(ctx, resource, refs) })
}
