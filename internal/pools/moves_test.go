package pools

import (
	"fmt"
	"testing"
)

// TestMovesFieldsAreBoundedLikeTheMoves: rebuilt moves never lend more
// buffer than there is, never set a watermark outside its range, and keep
// only reclaims between lines that still exist, a lender never lending more
// than its dedicated part.
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
	want := "[[b:a 60] [b:b 10] [l:a 50] [r:b 50] [sbuf 30] [w:a 9500] [w:b 3000]]"
	if got != want {
		t.Fatalf("fields %s, want %s", got, want)
	}
	if f := (Moves{}).Fields(lay); len(f) != 0 {
		t.Fatalf("no moves gave fields %v", f)
	}
}
