package pools

import (
	"errors"
	"math"
)

// ErrUnknownLine: the apply names no line of the resource (or names one on
// a resource without lines).
var ErrUnknownLine = errors.New("unknown business line")

// ErrLineClosing: the apply names a line that is being deleted (DELETE
// …/lines/{line} marked it closing and has not answered yet). No new
// session opens on such a line, continuations and critical work included;
// a replay of a session opened before still answers (HTTP 409 CONFLICT:
// the line either goes away, then 404, or stays because it held open
// sessions, then the apply may be sent again).
var ErrLineClosing = errors.New("business line is being deleted")

// Deleted is LineState.ClosingUntil of a line whose DELETE committed: its
// mark is the deleted line's tombstone and never expires (pool_close.lua
// keeps it as "d"; a PUT of the line takes it off).
const Deleted int64 = math.MaxInt64

// CloseLine sets line's closing mark, as a line's DELETE does in Redis
// (pool_close.lua) before it counts the line's open sessions: until is the
// mark's deadline (ms, the store's clock; the DELETE's start plus the
// bound, QC_LINE_CLOSE_BOUND), Deleted for the tombstone its commit
// leaves, 0 to take the mark off. While the mark holds (Closing) Apply
// refuses new sessions on the line with ErrLineClosing, so the count
// cannot miss one; a mark past its deadline (its DELETE died) is ignored.
// Errors: ErrUnknownLine.
func (m *Model) CloseLine(line string, until int64) error {
	l, ok := m.Lines[line]
	if !ok {
		return ErrUnknownLine
	}
	l.ClosingUntil = until
	return nil
}

// Closing reports whether the line's closing mark holds at now (ms, the
// store's clock): it is set and its deadline has not passed (now <
// ClosingUntil), or it is the tombstone (Deleted).
func (l *LineState) Closing(now int64) bool { return l.ClosingUntil > now }
