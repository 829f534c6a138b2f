package redisstore

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// errMalformedReply is wrapped by every decoder when a script's reply does
// not have the shape its contract (the comment at the top of the .lua)
// promises: a wrong type, a short array, an unknown code, a number that does
// not parse. It means a bug or a server that is not Redis-compatible, never
// a state to carry on from, so the call fails with it (not unavailable).
var errMalformedReply = errors.New("malformed script reply")

// reply reads one script's reply; the first thing that does not fit its
// contract is kept in err and every later read returns a zero value.
type reply struct {
	script string
	arr    []any
	err    error
}

// readReply expects v to be an array of minLen to maxLen elements.
func readReply(script string, v any, minLen, maxLen int) *reply {
	r := &reply{script: script}
	arr, ok := v.([]any)
	switch {
	case !ok:
		r.fail("%T %v, want an array", v, v)
	case len(arr) < minLen || len(arr) > maxLen:
		r.fail("%d elements %v, want %d to %d", len(arr), arr, minLen, maxLen)
	default:
		r.arr = arr
	}
	return r
}

func (r *reply) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %w: "+format, append([]any{r.script, errMalformedReply}, args...)...)
	}
}

// len is the reply's length (0 once it failed).
func (r *reply) len() int {
	if r.err != nil {
		return 0
	}
	return len(r.arr)
}

// int reads element i: a Lua number (int64) or a decimal string (the
// scripts return amounts Redis holds as strings, exact past 2^53).
func (r *reply) int(i int) int64 {
	if r.err != nil {
		return 0
	}
	if i >= len(r.arr) {
		r.fail("no element %d in %v", i, r.arr)
		return 0
	}
	switch x := r.arr[i].(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			r.fail("element %d %q is not an integer", i, x)
		}
		return n
	}
	r.fail("element %d is %T %v, want an integer", i, r.arr[i], r.arr[i])
	return 0
}

// str reads element i, which must be a string.
func (r *reply) str(i int) string {
	if r.err != nil {
		return ""
	}
	if i >= len(r.arr) {
		r.fail("no element %d in %v", i, r.arr)
		return ""
	}
	s, ok := r.arr[i].(string)
	if !ok {
		r.fail("element %d is %T %v, want a string", i, r.arr[i], r.arr[i])
	}
	return s
}

// strs reads element i, which must be an array of strings.
func (r *reply) strs(i int) []string {
	if r.err != nil {
		return nil
	}
	inner := readReply(r.script, r.arr[i], 0, math.MaxInt)
	out := make([]string, inner.len())
	for j := range out {
		out[j] = inner.str(j)
	}
	if inner.err != nil {
		r.err = inner.err
		return nil
	}
	return out
}

// scopedForm reads whether apply.lua's code says the
// session is under its scoped id (10 added to the code) and takes the 10
// off, for code to read the code itself.
func (r *reply) scopedForm() bool {
	if r.err != nil || len(r.arr) == 0 {
		return false
	}
	if c, ok := r.arr[0].(int64); ok && c > 10 {
		r.arr[0] = c - 10
		return true
	}
	return false
}

// code reads element 0 and checks it is one of valid.
func code[T ~int64](r *reply, valid ...T) T {
	c := T(r.int(0))
	if r.err != nil {
		return 0
	}
	for _, v := range valid {
		if c == v {
			return c
		}
	}
	r.fail("unknown code %d", int64(c))
	return 0
}

// flag decodes the reply of a script that answers a bare integer code (not
// an array), one of valid.
func flag[T ~int64](script string, v any, valid ...T) (T, error) {
	r := &reply{script: script, arr: []any{v}}
	c := code(r, valid...)
	return c, r.err
}

// applyCode is apply.lua's first reply element.
type applyCode int64

const (
	applyGranted     applyCode = 1 // reserved now
	applyReplayed    applyCode = 2 // the session exists with these arguments: its first answer
	applyRefused     applyCode = 3 // not enough remains (the reason follows); nothing changed
	applyWrongPeriod applyCode = 4 // the store's clock is outside the period; nothing changed
	applyNeedBalance applyCode = 5 // the period, the limit or the pool counters are not seeded; nothing changed
	applyConflict    applyCode = 6 // the session exists with other arguments
	applyUnknownLine applyCode = 8 // the line is not in the store's layout; nothing changed
	applyLineClosing applyCode = 9 // the line is being deleted (pool_close.lua); nothing changed
)

// applyLen is the length of every apply.lua reply but the short grant's
// (applyShortLen: {1, granted, remaining, now} of the plain fast path, whose
// start is now, lease now + the lease asked, period start the one sent and
// split all base; Store.Apply fills them in).
const (
	applyLen      = 18
	applyShortLen = 4
)

// applyReply is apply.lua's reply (session.lib's answer). Times are Unix ms.
type applyReply struct {
	code                                    applyCode
	granted, lease, start, periodStart, now int64
	// remaining: what the line (or the resource) could still be granted;
	// ownRemaining false: the script left it to the period's figures.
	remaining    int64
	ownRemaining bool
	// hasBalance: limit, charged, reserved (the period's) were read.
	hasBalance bool
	// held, room: what the period holds of temporary grants and what the
	// grants in force may still give (grantroom.lib; 20th and 21st
	// elements, answered with pools), for quota.RemainingWithGrants.
	held, room               int64
	limit, charged, reserved int64
	reason                   string
	tight                    bool
	drawn                    quota.PoolSplit
	scoped                   bool // the session is under the scoped id (KEYS[5])
	// spare: the spare buffer's move this apply made (the 19th element,
	// pools.ParseSpareNote's form), "" when it made none.
	spare string
	// short: the plain fast path's grant; lease, start, periodStart and
	// drawn are left for the caller (applyShortLen).
	short bool
}

// periodRemaining is the period's limit − charged − reserved (0 when the
// script did not read them).
func (a applyReply) periodRemaining() int64 { return a.limit - a.charged - a.reserved }

// decodeApply reads apply.lua's reply: 18 elements for every code, a 19th
// when the apply moved the spare buffer, or the plain fast path's short
// grant of 4 (applyShortLen).
func decodeApply(v any) (applyReply, error) {
	if arr, ok := v.([]any); ok && len(arr) == applyShortLen {
		r := readReply("apply.lua", v, applyShortLen, applyShortLen)
		a := applyReply{short: true, code: code(r, applyGranted), granted: r.int(1), remaining: r.int(2), ownRemaining: true, now: r.int(3)}
		return a, r.err
	}
	r := readReply("apply.lua", v, applyLen, applyLen+3)
	scoped := r.scopedForm()
	a := applyReply{scoped: scoped, code: code(r, applyGranted, applyReplayed, applyRefused, applyWrongPeriod, applyNeedBalance, applyConflict, applyUnknownLine, applyLineClosing),
		granted: r.int(1), lease: r.int(3), start: r.int(4), periodStart: r.int(5), now: r.int(6)}
	if r.err != nil {
		return a, r.err
	}
	if s, ok := r.arr[2].(string); !ok || s != "" {
		a.remaining, a.ownRemaining = r.int(2), true
	}
	if r.str(7) != "" || r.str(8) != "" || r.str(9) != "" {
		a.hasBalance = true
		a.limit, a.charged, a.reserved = optInt(r, 7), optInt(r, 8), optInt(r, 9)
	}
	a.reason, a.tight = r.str(10), r.int(11) == 1
	a.drawn = quota.PoolSplit{Base: r.int(12), Dedicated: r.int(13), Shared: r.int(14), Buffer: r.int(15), Grant: r.int(16), Grants: r.str(17)}
	if r.len() > applyLen {
		// Only a grant or a refusal moves the spare buffer; "" (with the
		// grants' figure after it) is no move.
		if a.spare = r.str(applyLen); (a.spare == "" && r.len() == applyLen+1) || (a.spare != "" && a.code != applyGranted && a.code != applyRefused) {
			r.fail("code %d with a spare move %q", a.code, a.spare)
		}
	}
	if r.len() == applyLen+2 {
		r.fail("%d elements: the grants' figure needs two", r.len())
	}
	if r.len() == applyLen+3 {
		a.held, a.room = r.int(applyLen+1), r.int(applyLen+2)
	}
	if r.err == nil && !a.ownRemaining && !a.hasBalance && (a.code == applyGranted || a.code == applyReplayed || a.code == applyRefused) {
		r.fail("code %d with neither its remaining nor the period's", a.code)
	}
	return a, r.err
}

// optInt reads element i, a decimal string, "" being 0.
func optInt(r *reply, i int) int64 {
	if r.str(i) == "" {
		return 0
	}
	return r.int(i)
}

// heartbeatCode is heartbeat.lua's first reply element.
type heartbeatCode int64

const (
	heartbeatNotFound  heartbeatCode = 0 // missing, cancelled or another client's
	heartbeatNotActive heartbeatCode = 1 // settled or leaked: the status follows
	heartbeatRenewed   heartbeatCode = 2 // the new lease expiry (ms) follows
)

// heartbeatReply is heartbeat.lua's reply.
type heartbeatReply struct {
	code   heartbeatCode
	status string // heartbeatNotActive
	lease  int64  // heartbeatRenewed, Unix ms
}

func decodeHeartbeat(v any) (heartbeatReply, error) {
	r := readReply("heartbeat.lua", v, 1, 2)
	h := heartbeatReply{code: code(r, heartbeatNotFound, heartbeatNotActive, heartbeatRenewed)}
	switch {
	case r.err != nil:
	case h.code == heartbeatNotFound && r.len() != 1:
		r.fail("code 0 with %d elements", r.len())
	case h.code == heartbeatNotActive:
		h.status = r.str(1)
	case h.code == heartbeatRenewed:
		h.lease = r.int(1)
	}
	return h, r.err
}

// finishCode is finish.lua's first reply element.
type finishCode int64

const (
	finishNotFound    finishCode = 0 // missing, cancelled or another client's
	finishSettled     finishCode = 1 // finished now
	finishReplayed    finishCode = 2 // a repeat of the first finish: its result
	finishConflict    finishCode = 6 // a repeat with another actual
	finishOverflow    finishCode = 7 // the period's counter would overflow; nothing written
	finishOtherPeriod finishCode = 8 // the session is in another period: it follows
)

// finishReply is finish.lua's reply. Times are Unix ms.
type finishReply struct {
	code                               finishCode
	granted, actual, refunded, overage int64
	period, start, end                 int64 // period: also finishOtherPeriod's
	leaked                             bool
	client                             string
	hasBalance                         bool // the period's balance still exists
	limit, charged, reserved           int64
	// pools: held and room were answered (grantroom.lib), for
	// quota.RemainingWithGrants.
	pools      bool
	held, room int64
}

func decodeFinish(v any) (finishReply, error) {
	r := readReply("finish.lua", v, 1, 16)
	f := finishReply{code: code(r, finishNotFound, finishSettled, finishReplayed, finishConflict, finishOverflow, finishOtherPeriod)}
	switch {
	case r.err != nil:
	case f.code == finishOtherPeriod:
		if r.len() != 2 {
			r.fail("code 8 with %d elements", r.len())
		}
		f.period = r.int(1)
	case f.code == finishSettled || f.code == finishReplayed:
		if r.len() != 14 && r.len() != 16 {
			r.fail("code %d with %d elements, want 14 or 16", f.code, r.len())
		}
		f.granted, f.actual, f.refunded, f.overage = r.int(1), r.int(2), r.int(3), r.int(4)
		f.period, f.start, f.end = r.int(6), r.int(7), r.int(8)
		switch l := r.int(9); l {
		case 0, 1:
			f.leaked = l == 1
		default:
			r.fail("wasLeaked %d", l)
		}
		f.client = r.str(10)
		if r.str(11) != "" { // "": the period's balance is gone
			f.hasBalance, f.limit, f.charged, f.reserved = true, r.int(11), r.int(12), r.int(13)
		}
		if r.len() == 16 && r.str(14) != "" {
			f.pools, f.held, f.room = true, r.int(14), r.int(15)
		}
	case r.len() != 1:
		r.fail("code %d with %d elements", f.code, r.len())
	}
	return f, r.err
}

// cancelCode is cancel.lua's first reply element.
type cancelCode int64

const (
	cancelNothing     cancelCode = 0 // missing or not USING: nothing to give back
	cancelGivenBack   cancelCode = 1 // the reservation was given back
	cancelOtherPeriod cancelCode = 2 // the session is in another period: it follows
	cancelNotAttempts cancelCode = 3 // another attempt replayed it (attempt mode): left alone
	cancelAbsent      cancelCode = 4 // no such session (attempt mode)
)

// decodeCancel returns cancel.lua's code and, for cancelOtherPeriod, the
// session's period (Unix ms).
func decodeCancel(v any) (cancelCode, int64, error) {
	r := readReply("cancel.lua", v, 1, 2)
	c := code(r, cancelNothing, cancelGivenBack, cancelOtherPeriod, cancelNotAttempts, cancelAbsent)
	var per int64
	switch {
	case r.err != nil:
	case c == cancelOtherPeriod:
		per = r.int(1)
	case r.len() != 1:
		r.fail("code %d with %d elements", c, r.len())
	}
	return c, per, r.err
}

// decodeBalance decodes balance.lua's {exists, limit, charged, reserved,
// activeSessions}.
func decodeBalance(v any) (quota.Balance, error) {
	r := readReply("balance.lua", v, 7, 7)
	var b quota.Balance
	switch e := r.int(0); e {
	case 0, 1:
		b.Exists = e == 1
	default:
		r.fail("exists %d", e)
	}
	b.Limit, b.Charged, b.Reserved, b.ActiveSessions = r.int(1), r.int(2), r.int(3), r.int(4)
	if r.err == nil && r.str(5) != "" { // "": a plain resource (grantroom.lib)
		b.Pools, b.GrantsHeld, b.GrantsRoom = true, r.int(5), r.int(6)
	}
	return b, r.err
}

// decodeExpired decodes expired.lua's {expired ids, leaked ids}.
func decodeExpired(v any) (expired, leaked []string, next time.Duration, err error) {
	r := readReply("expired.lua", v, 3, 3)
	expired, leaked = r.strs(0), r.strs(1)
	next = -1
	if n := r.int(2); n >= 0 {
		next = time.Duration(n) * time.Millisecond
	}
	return expired, leaked, next, r.err
}

// sweptReply is one 6-tuple of sweep.lua's reply. Times are Unix ms.
type sweptReply struct {
	id                   string
	period, granted, end int64
	fresh                bool
	client               string // the session's clientId
}

func decodeSweep(v any) ([]sweptReply, error) {
	r := readReply("sweep.lua", v, 0, math.MaxInt)
	if r.len()%6 != 0 {
		r.fail("%d elements, not 6-tuples", r.len())
	}
	out := make([]sweptReply, 0, r.len()/6)
	for i := 0; i+5 < r.len(); i += 6 {
		s := sweptReply{id: r.str(i), period: r.int(i + 1), granted: r.int(i + 2), end: r.int(i + 3), client: r.str(i + 5)}
		switch f := r.int(i + 4); f {
		case 0, 1:
			s.fresh = f == 1
		default:
			r.fail("fresh %d", f)
		}
		out = append(out, s)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// decodeSession decodes the HMGET of sessionFields; ok is false when the
// session does not exist. A field the session does not have (actual of a
// USING one) reads as zero; one that does not parse is an error.
func decodeSession(v []any) (st quota.SessionState, ok bool, err error) {
	r := readReply("session hash", v, len(sessionFields), len(sessionFields))
	if r.err != nil || v[0] == nil {
		return st, false, r.err
	}
	str := func(j int) string {
		if v[j] == nil {
			return ""
		}
		return r.str(j)
	}
	num := func(j int) int64 {
		if v[j] == nil {
			return 0
		}
		return r.int(j)
	}
	st = quota.SessionState{
		Status: quota.Status(str(0)), ClientID: str(1), Granted: num(2), Actual: num(3),
		Refunded: num(4), Overage: num(5), PeriodStart: ms(num(6)), StartTime: ms(num(7)),
		EndTime: ms(num(8)), WasLeaked: str(9) == "1",
		ApplyAmount: num(10), MinAmount: num(11), FailOpen: str(12) == "1", BusinessLine: str(13),
	}
	if fod := str(14); fod != "" && r.err == nil {
		if st.FailOpenDrawn, err = parseFailOpenDraw(fod, st.BusinessLine); err != nil {
			return st, false, err
		}
	}
	return st, r.err == nil, r.err
}
