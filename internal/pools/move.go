package pools

// Move is one change the controller or an operator makes to a resource's
// pools; the store applies it with the same bounds as the Model methods
// (Release, Return, Reclaim, GiveBack) and a watermark set.
type Move struct {
	Op     string // "release", "return", "reclaim", "giveback", "watermark" or "mode"
	Line   string // release / return: the line ("" = the shared pool); reclaim / giveback: the lender; watermark: the line
	To     string // reclaim / giveback: the borrower
	Amount int64  // the amount, or the watermark in basis points
	Mode   Mode   // mode: the line's elasticity mode (shown in the status)
}

// MoveOf is the store move that carries out a controller event, if any.
// Dry-run reclaims (and modes, confirmations, cancellations) move nothing.
func MoveOf(e Event) (Move, bool) {
	switch e.Kind {
	case "LEND_PREDICTIVE", "LEND_REACTIVE":
		return Move{Op: "release", Line: e.Line, Amount: e.Amount}, true
	case "RETURN":
		return Move{Op: "return", Line: e.Line, Amount: e.Amount}, true
	case "WATERMARK_RAISED", "WATERMARK_LOWERED", "WATERMARK_DECAYED":
		return Move{Op: "watermark", Line: e.Line, Amount: e.Amount}, true
	case "RECLAIM_EXECUTED":
		if e.To == "" {
			return Move{}, false // dry run
		}
		return Move{Op: "reclaim", Line: e.Line, To: e.To, Amount: e.Amount}, true
	case "MODE":
		if e.Mode == "" {
			return Move{}, false
		}
		return Move{Op: "mode", Line: e.Line, Mode: e.Mode}, true
	case "GIVE_BACK":
		return Move{Op: "giveback", Line: e.Line, To: e.To, Amount: e.Amount}, true
	}
	return Move{}, false
}
