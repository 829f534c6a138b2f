package pools

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// KindSpareToShared is the pool event that journals the spare buffer an
// apply put into the shared pool (Model.SpareToShared, apply.lua's
// spareToShared): Amount is all of it (lent to no one, and what other lines
// were lent and did not hold), on line "" (the shared pool). It is one of
// LendKinds, so PoolMoves counts it as buffer the shared pool holds; each
// line it was taken from has a RETURN event of its part beside it.
const KindSpareToShared = "SPARE_TO_SHARED"

// SpareMove is one move of the spare buffer into the shared pool, as
// apply.lua writes it into qc:{r}:pl (field "jq:<Ref>", removed once
// journalled) and answers it (the apply reply's 19th element, present only
// when the apply moved): Ref unique in the resource's history (the
// layout's epoch and a counter), Line the applying line, Unlent the
// buffer lent to no one that moved, From the buffer taken from each other
// line (units of the policy).
type SpareMove struct {
	Ref    string
	Line   string
	Unlent int64
	From   map[string]int64
}

// SpareNotePrefix is the qc:{r}:pl field prefix of a move not yet
// journalled (its Ref follows).
const SpareNotePrefix = "jq:"

// ParseSpareNote reads a move as apply.lua answers it:
// "<ref>|<line>|<unlent>|<from>=<n>;…" (the "jq:<ref>" field's value is
// the same without "<ref>|"). Errors: a malformed note.
func ParseSpareNote(note string) (SpareMove, error) {
	parts := strings.SplitN(note, "|", 4)
	if len(parts) != 4 || parts[0] == "" {
		return SpareMove{}, fmt.Errorf("spare move note %q: want ref|line|unlent|from", note)
	}
	m := SpareMove{Ref: parts[0], Line: parts[1], From: map[string]int64{}}
	var err error
	if m.Unlent, err = strconv.ParseInt(parts[2], 10, 64); err != nil || m.Unlent < 0 {
		return SpareMove{}, fmt.Errorf("spare move note %q: unlent %q", note, parts[2])
	}
	for _, kv := range strings.Split(parts[3], ";") {
		if kv == "" {
			continue
		}
		l, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || l == "" || err != nil || n < 0 {
			return SpareMove{}, fmt.Errorf("spare move note %q: part %q", note, kv)
		}
		m.From[l] += n
	}
	return m, nil
}

// Total is the buffer the move put into the shared pool.
func (m SpareMove) Total() int64 {
	t := m.Unlent
	for _, n := range m.From {
		t += n
	}
	return t
}

// Events are the pool events that journal m at atMs: a RETURN of each
// line's part and one SPARE_TO_SHARED of the total on the shared pool,
// each with its own ref ("<Ref>/<line>", "<Ref>/"), so journalling the
// same move twice (the apply, then the drain of what it left in Redis)
// stores it once (PoolJournal's refs are unique per resource).
func (m SpareMove) Events(atMs int64) []Event {
	why := fmt.Sprintf("a critical apply or continuation of line %s would have been refused: the spare buffer went to the shared pool (move %s)", m.Line, m.Ref)
	var evs []Event
	for _, l := range sortedKeys(m.From) {
		if n := m.From[l]; n > 0 {
			evs = append(evs, Event{AtMs: atMs, Kind: ReturnKind, Line: l, Amount: n, Reason: why, Ref: m.Ref + "/" + l})
		}
	}
	if t := m.Total(); t > 0 {
		evs = append(evs, Event{AtMs: atMs, Kind: KindSpareToShared, Amount: t, Reason: why, Ref: m.Ref + "/"})
	}
	return evs
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
