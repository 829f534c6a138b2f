package quota

import (
	"errors"
	"strings"
)

// Session ids are scoped to the client that applied and the resource
// (issue 11 §3.5): two clients may use the same sessionId, each getting its
// own session, and neither can learn of the other's (the answers are the
// same) or take it from the other.
//
// A session is stored, in the balance store and the ledger alike, under its
// bare id X while no other (resource, client) holds X, as every session was
// before ids were scoped, and under the scoped id "<resource>/<client>/X"
// (ScopedSessionID) when another one does: apply.lua (scoped_session.lib)
// decides it in the same atomic step as the grant (X held in Redis by a
// session of another client, of the client's own under the scoped id), and
// the ledger's unique key on the stored id decides the rest (X's row is
// another's: the grant made under X is given back and the apply is made
// again under the scoped id, ApplyCmd.Scoped). A session id never holds '/'
// (validateSessionID) nor does a resource name, so the public id is what
// follows the last '/' (PublicSessionID). The stores treat a stored id as
// an opaque key: what reads ids back from them (the sweeper,
// reconciliation, seeding, catch-up, compensation) agrees by construction;
// answers and the operators' views show the public id.
//
// A heartbeat, a finish and a ledger read of (resource, client, X) look at
// X first, with the owner check (another client's session there is "not
// found"), then at the scoped id. The client is the API key's when API keys
// are on. Without them it is the clientId the caller gives, on apply and on
// heartbeat and finish: a caller that gives none on heartbeat or finish
// reaches the session under X whoever's it is, as before ids were scoped
// (there is no authenticated client to scope by); one that shares an id
// with another client must send the clientId it applied with (the Go SDK
// does). A caller without a client id has no scope: its applies use X
// alone, and another's session there is a conflict, as before.
//
// Existing rows and Redis sessions keep their bare id and go on working;
// Options.GlobalSessionIDs (QC_GLOBAL_SESSION_IDS=1) makes no scoped ids at
// all (another client's id is a 409 conflict, as before) for a rolling
// upgrade whose old instances know only bare ids.

// ScopedSessionID is the stored id of a session of client on resource with
// id when another client holds id: "resource/client/id".
func ScopedSessionID(resource, client, id string) string {
	return resource + "/" + client + "/" + id
}

// PublicSessionID is the id a client knows of a stored session id: the part
// after the last '/' (all of it for a bare id).
func PublicSessionID(stored string) string {
	return stored[strings.LastIndexByte(stored, '/')+1:]
}

// scopedForm is the scoped id an apply of (resource, client, id) may make,
// or "" when there is none: for a caller without a client id (no scope to
// keep apart: one namespace, as before, where another's id is a conflict)
// and with Options.GlobalSessionIDs.
func (s *Service) scopedForm(resource, client, id string) string {
	if s.opt.GlobalSessionIDs {
		return ""
	}
	return lookupForm(resource, client, id)
}

// lookupForm is the scoped id a heartbeat or finish of (resource, client,
// id) looks for after the bare one, "" for a caller without a client id.
// Options.GlobalSessionIDs does not turn it off: the flag stops new scoped
// ids, but while it is being unset (a rolling restart) instances without it
// make them, and their sessions must heartbeat and finish here too.
func lookupForm(resource, client, id string) string {
	if client == "" {
		return ""
	}
	return ScopedSessionID(resource, client, id)
}

// ownedBy reports whether a ledger row is the session of client on resource
// (the bare id may hold another's).
func ownedBy(row UsageRecord, resource, client string) bool {
	return row.ResourceName == resource && row.ClientID == client
}

// publicError returns err as the caller may see it: its message names the
// public id where it named the stored one, and a *NotActiveError in it
// carries the public id. errors.Is and errors.As see err's chain as before.
func publicError(err error, stored, public string) error {
	if err == nil || stored == "" || stored == public {
		return err
	}
	var na *NotActiveError
	if errors.As(err, &na) {
		na.SessionID = PublicSessionID(na.SessionID)
	}
	return &publicIDError{err: err, msg: strings.ReplaceAll(err.Error(), stored, public)}
}

type publicIDError struct {
	err error
	msg string
}

func (e *publicIDError) Error() string { return e.msg }
func (e *publicIDError) Unwrap() error { return e.err }
