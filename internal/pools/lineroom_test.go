package pools

import (
	"fmt"
	"testing"
)

// Critical work on an EXPLORE line held at 95 % of its reach (its
// watermark, 60 %, refuses critical work from 80 %: here about 75 % of it):
// each answer's Remaining (LineRoom) says what the next critical apply of 1
// gets, 0 exactly when the watermark's counter refuses it (before this
// change always the line's capacity, also before a refusal); a
// continuation is never refused by the watermark and is answered the
// capacity.
func TestLineRoomOfCriticalWorkFollowsTheWatermark(t *testing.T) {
	m := explore(t)
	mustApply(t, m, ApplyReq{SessionID: "more", Line: "x", Amount: 250, Continuation: true})
	d := mustApply(t, m, ApplyReq{SessionID: "c0", Line: "x", Amount: 1, Critical: true})
	zero, refused := 0, 0
	for i := 1; i <= 30; i++ {
		next := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("c%d", i), Line: "x", Amount: 1, Critical: true})
		if (d.Remaining == 0) != (next.Reason == ReasonWatermark) {
			t.Fatalf("apply %d: the answer before said lineRemaining %d, this one was %q (granted %d)", i, d.Remaining, next.Reason, next.Granted)
		}
		if d.Remaining == 0 {
			zero++
		}
		if next.Reason != "" {
			refused++
		} else if d.Remaining != max(0, 1000-m.Lines["x"].Used()+1) {
			t.Fatalf("apply %d: granted after lineRemaining %d, the line had %d left", i, d.Remaining, 1000-m.Lines["x"].Used()+1)
		}
		d = next
	}
	if zero == 0 || refused == 0 {
		t.Fatalf("the watermark refused %d critical applies (%d answers 0): the test did not reach it", refused, zero)
	}
	if got := m.LineRoom(m.Lines["x"], ApplyReq{Line: "x", Continuation: true}); got != 1000-m.Lines["x"].Used() {
		t.Fatalf("a continuation's lineRemaining %d, want the capacity %d", got, 1000-m.Lines["x"].Used())
	}
}

// An apply refused for lack of room (LINE_EXHAUSTED, POOL_EXHAUSTED,
// EXHAUSTED) leaves the watermark's counter as it was: a refusal changes
// nothing, and the lineRemaining it answered stays what the next apply
// gets. Before, each such refusal added the share to RefuseAcc, so a
// caller's too-large ask made the advised one refused WATERMARK (a review:
// 12 of 150 probes; apply.lua the same, held to this by
// TestPoolApplyMatchesTheModel).
func TestAnApplyRefusedForRoomLeavesTheWatermarkCounter(t *testing.T) {
	m := explore(t)
	mustApply(t, m, ApplyReq{SessionID: "more", Line: "x", Amount: 250, Continuation: true})
	l := m.Lines["x"]
	share := RefuseShare(l.Used(), m.Reach(l), l.Watermark, true)
	if share <= 0 || share >= 10000 {
		t.Fatalf("the line's critical share %d: the test needs one between 0 and 10000", share)
	}
	rooms := 0
	for i := range 30 {
		before := l.RefuseAcc
		d := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("big%d", i), Line: "x", Amount: 1_000_000, Critical: true})
		switch d.Reason {
		case ReasonWatermark:
			continue
		case "":
			t.Fatalf("apply %d of 1,000,000 granted %d", i, d.Granted)
		}
		rooms++
		if l.RefuseAcc != before {
			t.Fatalf("apply %d refused %s moved the watermark counter %d → %d", i, d.Reason, before, l.RefuseAcc)
		}
		if d.Remaining > 0 {
			next := mustApply(t, m, ApplyReq{SessionID: fmt.Sprintf("ask%d", i), Line: "x", Amount: d.Remaining, Critical: true})
			if next.Reason != "" {
				t.Fatalf("apply %d: asked the advised %d, refused %s", i, d.Remaining, next.Reason)
			}
		}
	}
	if rooms == 0 {
		t.Fatal("no apply was refused for lack of room: the test did not reach it")
	}
}
