package quota

import "testing"

// A scoped id is "resource/client/id"; the id its client knows is the part
// after the last '/', all of a bare id.
func TestPublicSessionIDOfAScopedID(t *testing.T) {
	scoped := ScopedSessionID("r", "c1", "s-1")
	if scoped != "r/c1/s-1" {
		t.Fatalf("scoped id %q", scoped)
	}
	for stored, want := range map[string]string{scoped: "s-1", "s-1": "s-1"} {
		if got := PublicSessionID(stored); got != want {
			t.Errorf("PublicSessionID(%q) = %q, want %q", stored, got, want)
		}
	}
}
