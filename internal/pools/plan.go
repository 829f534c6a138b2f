package pools

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Tier is a line's priority tier; it sets the line's reject watermark.
type Tier string

// The three tiers of seed 003.
const (
	TierCore    Tier = "CORE"    // critical business: refused only for non-critical applies above 95 %
	TierGrowth  Tier = "GROWTH"  // growing business: watermark 80 %
	TierExplore Tier = "EXPLORE" // experiments: watermark 60 %
)

// BaseWatermark returns the tier's reject watermark in basis points of what
// the line may use (CORE 9500, GROWTH 8000, EXPLORE 6000), or 0 for an
// unknown tier.
func (t Tier) BaseWatermark() int64 {
	switch t {
	case TierCore:
		return 9500
	case TierGrowth:
		return 8000
	case TierExplore:
		return 6000
	}
	return 0
}

// Valid reports whether t is one of the three tiers.
func (t Tier) Valid() bool { return t.BaseWatermark() > 0 }

// MaxWatermark is the highest a watermark is ever raised to (95 %).
const MaxWatermark int64 = 9500

// Elasticity says which automatic moves the controller makes.
type Elasticity string

// Elasticity modes. AUTO picks predictive or reactive per line by the
// forecast's error; OFF makes no automatic move at all (watermarks stay at
// their tier's value, nothing is lent or reclaimed).
const (
	ElasticityAuto       Elasticity = "AUTO"
	ElasticityPredictive Elasticity = "PREDICTIVE"
	ElasticityReactive   Elasticity = "REACTIVE"
	ElasticityOff        Elasticity = "OFF"
)

// Valid reports whether e is one of the four modes.
func (e Elasticity) Valid() bool {
	switch e {
	case ElasticityAuto, ElasticityPredictive, ElasticityReactive, ElasticityOff:
		return true
	}
	return false
}

// Settings is a policy's "pools" object. Percentages are whole percents.
type Settings struct {
	SharedPercent      int64 `json:"sharedPercent"`      // of the limit; default 60
	DedicatedPercent   int64 `json:"dedicatedPercent"`   // of the limit; default 30
	BufferPercent      int64 `json:"bufferPercent"`      // of the limit; default 10
	BorrowLimitPercent int64 `json:"borrowLimitPercent"` // of a line's dedicated part, 0 … 1000; default 50
	// Elasticity: AUTO (default), PREDICTIVE, REACTIVE or OFF.
	Elasticity Elasticity `json:"elasticity"`
	// ReclaimThresholdPercent: when the shared pool is this full (1 … 100;
	// default 90) the controller puts the buffer lines do not hold into
	// the shared pool (guardShared, guard.go). Reclaims start when a line is under
	// pressure, whatever the shared pool's use (reclaim.go).
	ReclaimThresholdPercent int64 `json:"reclaimThresholdPercent"`
	// ReclaimConfirmSeconds: a WARNED reclaim is confirmed automatically
	// after this many seconds; 0 = only by hand (POST …/confirm). Default 30.
	ReclaimConfirmSeconds int64 `json:"reclaimConfirmSeconds"`
	// ReclaimDryRun: reclaims are recorded (WARNED, CONFIRMED, EXECUTED with
	// dryRun true) but move nothing.
	ReclaimDryRun bool `json:"reclaimDryRun"`
}

// DefaultSettings are the settings of seed 003.
func DefaultSettings() Settings {
	return Settings{SharedPercent: 60, DedicatedPercent: 30, BufferPercent: 10, BorrowLimitPercent: 50,
		Elasticity: ElasticityAuto, ReclaimThresholdPercent: 90, ReclaimConfirmSeconds: 30}
}

// InputError is a bad setting or line (HTTP 400); nothing was changed.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

func bad(field, format string, a ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Validate checks the settings: each percentage 0 … 100, the three shares
// summing to 100, borrowLimitPercent 0 … 1000, a known elasticity,
// reclaimThresholdPercent 1 … 100, reclaimConfirmSeconds 0 … 86400.
func (s Settings) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"pools.sharedPercent", s.SharedPercent}, {"pools.dedicatedPercent", s.DedicatedPercent}, {"pools.bufferPercent", s.BufferPercent}} {
		if f.v < 0 || f.v > 100 {
			return bad(f.name, "must be 0 … 100")
		}
	}
	switch {
	case s.SharedPercent+s.DedicatedPercent+s.BufferPercent != 100:
		return bad("pools", "sharedPercent + dedicatedPercent + bufferPercent must be 100, not %d",
			s.SharedPercent+s.DedicatedPercent+s.BufferPercent)
	case s.BorrowLimitPercent < 0 || s.BorrowLimitPercent > 1000:
		return bad("pools.borrowLimitPercent", "must be 0 … 1000")
	case !s.Elasticity.Valid():
		return bad("pools.elasticity", "must be AUTO, PREDICTIVE, REACTIVE or OFF")
	case s.ReclaimThresholdPercent < 1 || s.ReclaimThresholdPercent > 100:
		return bad("pools.reclaimThresholdPercent", "must be 1 … 100")
	case s.ReclaimConfirmSeconds < 0 || s.ReclaimConfirmSeconds > 86400:
		return bad("pools.reclaimConfirmSeconds", "must be 0 … 86400")
	}
	return nil
}

// LineSpec is one business line as an operator declares it: a tier and
// either a weight (its share of the dedicated pool) or an explicit
// dedicated amount.
type LineSpec struct {
	Name      string `json:"businessLine"`
	Tier      Tier   `json:"tier"`
	Weight    int64  `json:"weight,omitempty"`    // 1 … 1000; ignored when Dedicated > 0
	Dedicated int64  `json:"dedicated,omitempty"` // explicit dedicated part, in the policy's unit
}

var lineNameRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// ValidateLineName checks a line name: the resource-name rule, [a-z0-9_.-],
// 1 to 64 bytes.
func ValidateLineName(name string) error {
	if !lineNameRE.MatchString(name) {
		return bad("businessLine", "must be 1 to 64 characters of [a-z0-9_.-]")
	}
	return nil
}

// Validate checks one line: its name, a known tier, and a weight 1 … 1000
// or a dedicated amount 1 … 2^53−1 (exactly one of the two).
func (l LineSpec) Validate() error {
	if err := ValidateLineName(l.Name); err != nil {
		return err
	}
	if !l.Tier.Valid() {
		return bad("tier", "must be CORE, GROWTH or EXPLORE")
	}
	switch {
	case l.Weight != 0 && l.Dedicated != 0:
		return bad("weight", "give a weight or a dedicated amount, not both")
	case l.Dedicated < 0 || l.Dedicated > MaxAmount:
		return bad("dedicated", "must be 1 … 2^53-1")
	case l.Dedicated == 0 && (l.Weight < 1 || l.Weight > 1000):
		return bad("weight", "must be 1 … 1000")
	}
	return nil
}

// MaxAmount is the largest amount accepted anywhere (2^53−1), as in
// internal/quota.
const MaxAmount int64 = 1<<53 - 1

// MaxLines bounds the lines of one resource (every apply reads them all).
const MaxLines = 64

// Layout is who owns how much of one period's limit.
type Layout struct {
	Limit     int64        `json:"limit"`
	Shared    int64        `json:"shared"`    // the shared pool
	Dedicated int64        `json:"dedicated"` // the dedicated pool: the sum of the lines' parts, or what is unassigned goes to Shared
	Buffer    int64        `json:"buffer"`    // the reserve
	Lines     []LineLayout `json:"lines"`     // sorted by name
}

// LineLayout is one line's fixed share.
type LineLayout struct {
	Name      string `json:"businessLine"`
	Tier      Tier   `json:"tier"`
	Dedicated int64  `json:"dedicated"` // its dedicated part
	BorrowCap int64  `json:"borrowCap"` // the most it may hold from the shared pool: dedicated × borrowLimitPercent / 100
}

// Line returns the layout of the named line.
func (l Layout) Line(name string) (LineLayout, bool) {
	i, ok := slices.BinarySearchFunc(l.Lines, name, func(x LineLayout, n string) int { return strings.Compare(x.Name, n) })
	if !ok {
		return LineLayout{}, false
	}
	return l.Lines[i], true
}

// Plan computes the layout of a limit: Shared = ⌊limit·shared%⌋, Buffer =
// ⌊limit·buffer%⌋, the dedicated pool the rest (so the three sum to the
// limit exactly). Lines with an explicit dedicated amount take it first;
// the rest of the dedicated pool is cut by weight with the largest-remainder
// method (ties to the earlier name). Whatever no line holds (no weighted
// line) goes to the shared pool. Errors (*InputError): bad settings or lines,
// duplicate names, more than MaxLines, explicit amounts above the
// dedicated pool.
func Plan(limit int64, s Settings, specs []LineSpec) (Layout, error) {
	if err := s.Validate(); err != nil {
		return Layout{}, err
	}
	if limit < 0 || limit > MaxAmount {
		return Layout{}, bad("totalLimit", "must be 0 … 2^53-1")
	}
	if len(specs) > MaxLines {
		return Layout{}, bad("businessLine", "a resource has at most %d lines", MaxLines)
	}
	specs = slices.Clone(specs)
	slices.SortFunc(specs, func(a, b LineSpec) int { return strings.Compare(a.Name, b.Name) })
	lay := Layout{Limit: limit, Shared: limit * s.SharedPercent / 100, Buffer: limit * s.BufferPercent / 100}
	pool := limit - lay.Shared - lay.Buffer
	var explicit, weights int64
	for i, sp := range specs {
		if err := sp.Validate(); err != nil {
			return Layout{}, err
		}
		if i > 0 && specs[i-1].Name == sp.Name {
			return Layout{}, bad("businessLine", "%q appears twice", sp.Name)
		}
		explicit += sp.Dedicated
		if sp.Dedicated == 0 {
			weights += sp.Weight
		}
	}
	if explicit > pool {
		return Layout{}, bad("dedicated", "the lines' explicit dedicated amounts (%d) exceed the dedicated pool (%d)", explicit, pool)
	}
	rest := pool - explicit
	lay.Lines = make([]LineLayout, len(specs))
	type rem struct {
		i int
		r int64
	}
	var rems []rem
	var given int64
	for i, sp := range specs {
		ll := LineLayout{Name: sp.Name, Tier: sp.Tier, Dedicated: sp.Dedicated}
		if sp.Dedicated == 0 {
			// rest·w may pass 2^63 only for limits near 2^53 and weights near
			// 1000·64; split the product to stay exact.
			q, r := mulDiv(rest, sp.Weight, weights)
			ll.Dedicated = q
			given += q
			rems = append(rems, rem{i, r})
		}
		lay.Lines[i] = ll
	}
	left := rest - given
	if weights == 0 {
		lay.Shared += rest
		left = 0
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.r > b.r:
			return -1
		case a.r < b.r:
			return 1
		}
		return 0
	})
	for k := 0; left > 0 && k < len(rems); k++ {
		lay.Lines[rems[k].i].Dedicated++
		left--
	}
	for i := range lay.Lines {
		lay.Lines[i].BorrowCap = lay.Lines[i].Dedicated * s.BorrowLimitPercent / 100
		lay.Dedicated += lay.Lines[i].Dedicated
	}
	return lay, nil
}

// mulDiv returns ⌊a·b/c⌋ and the remainder a·b mod c for a, b, c ≥ 0, c > 0,
// a·b possibly beyond int64 (a < 2^53, b < 2^17).
func mulDiv(a, b, c int64) (int64, int64) {
	qa, ra := a/c, a%c
	// a·b/c = qa·b + ra·b/c; ra < c ≤ 2^17·64, so ra·b < 2^41.
	return qa*b + ra*b/c, ra * b % c
}
