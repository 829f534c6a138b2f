package pools

import "errors"

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

// CloseLine marks line closing (closing true) or open again, as a line's
// DELETE does in Redis (pool_close.lua) before it counts the line's open
// sessions: from then on Apply refuses new sessions on it with
// ErrLineClosing, so the count cannot miss one. Errors: ErrUnknownLine.
func (m *Model) CloseLine(line string, closing bool) error {
	l, ok := m.Lines[line]
	if !ok {
		return ErrUnknownLine
	}
	l.Closing = closing
	return nil
}
