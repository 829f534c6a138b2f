package pools

import (
	"fmt"
	"testing"
)

// TestMovesFieldsAreBoundedLikeTheMoves: rebuilt moves never set a
// watermark outside its range, and keep only reclaims between lines that
// still exist, a lender never lending more than its dedicated part. Lent
// buffer past the buffer (here 130 of 100) is passed on whole: the store
// cuts it back and answers the cut, which is journalled
// (TestARebuildsCutIsJournalled in internal/httpapi).
func TestMovesFieldsAreBoundedLikeTheMoves(t *testing.T) {
	lay := Layout{Buffer: 100, Lines: []LineLayout{{Name: "a", Dedicated: 50}, {Name: "b", Dedicated: 30}}}
	m := Moves{
		Watermarks: map[string]int64{"a": 9900, "b": 100, "gone": 5000},
		Buffer:     map[string]int64{"": 30, "a": 60, "b": 40, "gone": 10},
		Reclaims: []Reclaim{
			{From: "a", To: "b", Amount: 40, State: ReclaimExecuted},
			{From: "a", To: "b", Amount: 40, State: ReclaimExecuted}, // only 10 more of a's 50
			{From: "b", To: "a", Amount: 5, State: ReclaimExecuted, DryRun: true},
			{From: "b", To: "a", Amount: 5, State: ReclaimWarned},
			{From: "b", To: "gone", Amount: 5, State: ReclaimExecuted},
		},
	}
	got := fmt.Sprint(m.Fields(lay))
	want := "[[b:a 60] [b:b 40] [l:a 50] [r:b 50] [sbuf 30] [w:a 9500] [w:b 3000]]"
	if got != want {
		t.Fatalf("fields %s, want %s", got, want)
	}
	if f := (Moves{}).Fields(lay); len(f) != 0 {
		t.Fatalf("no moves gave fields %v", f)
	}
}

// TestSpareNotesBecomeEvents: apply.lua's note of a spare move reads back
// as a RETURN of each line's part and one SPARE_TO_SHARED of the whole,
// each with a ref of its own; malformed notes are errors.
func TestSpareNotesBecomeEvents(t *testing.T) {
	m, err := ParseSpareNote("17-3|a|250|c=40;b=100")
	if err != nil || m.Total() != 390 {
		t.Fatalf("%+v %v", m, err)
	}
	var got []string
	for _, e := range m.Events(5) {
		got = append(got, fmt.Sprint(e.Kind, " ", e.Line, " ", e.Amount, " ", e.Ref))
	}
	want := "[RETURN b 100 17-3/b RETURN c 40 17-3/c SPARE_TO_SHARED  390 17-3/]"
	if fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}
	for _, bad := range []string{"", "r|a|x|", "r|a|1|b=-1", "r|a|1|=5", "|a|1|", "r|a|1"} {
		if _, err := ParseSpareNote(bad); err == nil {
			t.Errorf("note %q read without error", bad)
		}
	}
}
