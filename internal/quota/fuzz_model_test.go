//go:build !mutation

package quota_test

import (
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The model of FuzzApplyFinishSequences (fuzz_test.go): what the Service
// should hold after each operation.

// mSession is the model of one session.
type mSession struct {
	res           int
	client        string
	amount, min   int64
	granted       int64
	finished      bool
	actual        int64
	firstApply    quota.ApplyResponse
	firstFinish   quota.FinishResponse
	lease         time.Time // as of the last apply or heartbeat
	finishedAfter bool      // finished since firstApply was answered
}

// seqModel is what the Service should hold. Session ids are scoped to
// resource and client (quota scope.go): a session is keyed by all three,
// and bare names, per id, the session stored under the bare id (the first
// granted with it); the others are stored under their scoped ids. A
// session without a client is always the bare id's (no scope).
type seqModel struct {
	limit, charged, reserved [2]int64
	sessions                 map[sKey]*mSession
	bare                     map[string]sKey
}

// sKey is a session's scope and id.
type sKey struct {
	res         int
	client, sid string
}

// find is the session a heartbeat or finish of (res, client, sid) reaches:
// the bare id's when it is of res and client (any client for ""), else
// the scoped id's.
func (m *seqModel) find(res int, client, sid string) *mSession {
	if b, ok := m.bare[sid]; ok && b.res == res && (client == "" || b.client == client) {
		return m.sessions[b]
	}
	return m.sessions[sKey{res, client, sid}]
}

func (m *seqModel) remaining(res int) int64 { return m.limit[res] - m.charged[res] - m.reserved[res] }

func (m *seqModel) active(res int) int64 {
	var n int64
	for _, s := range m.sessions {
		if s.res == res && !s.finished {
			n++
		}
	}
	return n
}
