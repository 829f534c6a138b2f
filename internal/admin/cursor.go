package admin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/quotacenter/quota-center/internal/quota"
)

// cursorKeyName names the shared secret in Redis that signs cursors: every
// instance signs with the same key, so a cursor from one verifies on any.
const cursorKeyName = "admin-cursor"

// cursor is the position of a session listing, bound to its query. On the
// wire it is base64url(JSON) "." base64url(HMAC-SHA256 truncated to 16
// bytes): opaque to clients, and any change to it fails the check.
type cursor struct {
	V        int    `json:"v"`
	Resource string `json:"r"`
	Client   string `json:"c,omitempty"`
	Line     string `json:"ln,omitempty"`
	Status   string `json:"st,omitempty"`
	Phase    string `json:"ph"` // "live" or "hist"
	LeaseMs  int64  `json:"l,omitempty"`
	Skip     int    `json:"k,omitempty"`
	StartMs  int64  `json:"s,omitempty"`
	ID       int64  `json:"i,omitempty"`
}

func (s *Service) cursorKey(ctx context.Context) ([]byte, error) {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	if s.key != nil {
		return s.key, nil
	}
	k, err := s.d.Live.SharedSecret(ctx, cursorKeyName, 32)
	if err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	s.key = k
	return k, nil
}

func sign(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return m.Sum(nil)[:16]
}

func (s *Service) encodeCursor(ctx context.Context, c cursor) (string, error) {
	key, err := s.cursorKey(ctx)
	if err != nil {
		return "", err
	}
	c.V = 1
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(b) + "." + enc.EncodeToString(sign(key, b)), nil
}

// decodeCursor verifies raw and checks that it belongs to the query q
// (same resource, client and status). Errors: ErrBadCursor (wrapped in a
// *quota.ValidationError for field "cursor"), quota.ErrUnavailable.
func (s *Service) decodeCursor(ctx context.Context, raw string, q cursor) (cursor, error) {
	bad := func(reason string) error {
		return badCursor{&quota.ValidationError{Field: "cursor", Reason: reason}}
	}
	p, m, ok := strings.Cut(raw, ".")
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p)
	mac, err2 := enc.DecodeString(m)
	if !ok || err1 != nil || err2 != nil || len(raw) > 1024 {
		return cursor{}, bad("is not a cursor this server issued")
	}
	key, err := s.cursorKey(ctx)
	if err != nil {
		return cursor{}, err
	}
	if !hmac.Equal(mac, sign(key, payload)) {
		return cursor{}, bad("is not a cursor this server issued (or it was altered)")
	}
	var c cursor
	if err := json.Unmarshal(payload, &c); err != nil || c.V != 1 || (c.Phase != "live" && c.Phase != "hist") {
		return cursor{}, bad("is not a cursor this server issued")
	}
	if c.Resource != q.Resource || c.Client != q.Client || c.Line != q.Line || c.Status != q.Status {
		return cursor{}, bad("belongs to another query: repeat resourceName, clientId, businessLine and status as they were")
	}
	return c, nil
}

// badCursor is a *quota.ValidationError for field "cursor" that is also
// ErrBadCursor (errors.Is); its message is the validation error's alone
// ("invalid cursor: <reason>", not "invalid cursor: invalid cursor: …").
type badCursor struct{ *quota.ValidationError }

func (e badCursor) Unwrap() error        { return e.ValidationError }
func (e badCursor) Is(target error) bool { return target == ErrBadCursor }
