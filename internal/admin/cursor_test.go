package admin

import (
	"errors"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

// A cursor this server did not issue is ErrBadCursor and a
// *quota.ValidationError for field "cursor" whose message says "invalid
// cursor" once: the 400's message read "invalid cursor: invalid cursor: …".
func TestBadCursorSaysInvalidCursorOnce(t *testing.T) {
	_, err := (&Service{}).decodeCursor(t.Context(), "zzz", cursor{})
	var ve *quota.ValidationError
	if !errors.Is(err, ErrBadCursor) || !errors.As(err, &ve) || ve.Field != "cursor" {
		t.Fatalf("%v: want ErrBadCursor and a validation error of cursor", err)
	}
	if got, want := err.Error(), "invalid cursor: is not a cursor this server issued"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
