package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Scenarios. A session scenario is a fixed sequence of steps on one
// client-chosen session id; "heartbeat" heartbeats a pool of sessions opened
// before the measurement.
const (
	ScenarioApply            = "apply"             // apply, a fresh session id each
	ScenarioSession          = "session"           // apply → finish
	ScenarioHeartbeatSession = "heartbeat-session" // apply → heartbeat ×2 → finish
	ScenarioHeartbeat        = "heartbeat"         // heartbeat only, on a pre-opened pool
)

// Scenarios lists every scenario in report order.
var Scenarios = []string{ScenarioApply, ScenarioSession, ScenarioHeartbeatSession, ScenarioHeartbeat}

type stepKind int

const (
	stepApply stepKind = iota
	stepHeartbeat
	stepFinish
)

func (k stepKind) String() string { return [...]string{"apply", "heartbeat", "finish"}[k] }

func (k stepKind) path() string {
	return [...]string{"/quota/apply", "/quota/heartbeat", "/quota/finish"}[k]
}

func stepsOf(scenario string) ([]stepKind, error) {
	switch scenario {
	case ScenarioApply:
		return []stepKind{stepApply}, nil
	case ScenarioSession:
		return []stepKind{stepApply, stepFinish}, nil
	case ScenarioHeartbeatSession:
		return []stepKind{stepApply, stepHeartbeat, stepHeartbeat, stepFinish}, nil
	case ScenarioHeartbeat:
		return []stepKind{stepHeartbeat}, nil
	}
	return nil, fmt.Errorf("unknown scenario %q (want one of %s)", scenario, strings.Join(Scenarios, ", "))
}

// pending is the next step of one in-flight session.
type pending struct {
	id   string
	step int
}

// driver feeds a vegeta Attacker with the requests of many interleaved
// sessions, each step of a session issued only after the answer to its
// previous step came back.
//
// How, with vegeta's API: the Attacker calls Targeter from its workers and
// hands each Result to the one goroutine reading the results channel, which
// calls observe. observe queues step k+1 of a session only once the 2xx
// answer to step k has been read (vegeta reads the whole body before it
// sends the Result). Targeter takes a queued step first and starts a new
// session only when none is queued, so it never blocks (a blocked Targeter
// would count as latency) and the number of open sessions stays bounded by
// about the number of workers.
//
// The session id and step travel in the target URL's fragment
// (…/quota/finish#<id>/<step>): Result.URL is the target's URL as given,
// while the request line a server sees has no fragment. So every Result,
// even a failed one, says which session and step it was, without decoding
// the answer.
type driver struct {
	base     string
	resource string // JSON-quoted
	clientID string // JSON-quoted, or "" to leave clientId out
	amount   int64
	actual   int64
	header   http.Header
	steps    []stepKind
	pool     []string // heartbeat scenario: sessions opened beforehand
	prefix   string   // session id prefix, unique per driver

	counter atomic.Uint64
	mu      sync.Mutex
	ready   []pending

	// Written by observe only (the results goroutine).
	stats runStats
}

type runStats struct {
	started   uint64 // sessions whose first step was issued (counter)
	completed uint64 // sessions whose last step answered 2xx
	aborted   uint64 // sessions dropped after a non-2xx answer or an error
	overall   vegeta.Metrics
	perStep   [3]*vegeta.Metrics
	codes     map[int]uint64
	errors    map[string]uint64 // first distinct error strings, with counts
	ok        uint64
	badResult uint64 // results whose URL carried no session fragment (a bug)
}

func newDriver(base, resource, clientID string, amount, actual int64, header http.Header, scenario string) (*driver, error) {
	steps, err := stepsOf(scenario)
	if err != nil {
		return nil, err
	}
	q, _ := json.Marshal(resource)
	d := &driver{
		base: strings.TrimRight(base, "/"), resource: string(q), amount: amount, actual: actual,
		header: header, steps: steps, prefix: "qcb" + randomHex(4),
	}
	if clientID != "" {
		c, _ := json.Marshal(clientID)
		d.clientID = string(c)
	}
	d.reset()
	return d, nil
}

// reset starts a new phase (warm-up → measurement): fresh statistics, no
// queued steps, and a new id prefix so the phases never share a session.
func (d *driver) reset() {
	d.mu.Lock()
	d.ready = nil
	d.mu.Unlock()
	d.prefix = "qcb" + randomHex(4)
	d.counter.Store(0)
	d.stats = runStats{codes: map[int]uint64{}, errors: map[string]uint64{}}
	for i := range d.stats.perStep {
		d.stats.perStep[i] = &vegeta.Metrics{}
	}
}

func (d *driver) newID() string {
	n := d.counter.Add(1)
	return d.prefix + "-" + strconv.FormatUint(n, 36)
}

// targeter is the vegeta.Targeter.
func (d *driver) targeter() vegeta.Targeter {
	var rr atomic.Uint64
	return func(t *vegeta.Target) error {
		var p pending
		if len(d.pool) > 0 {
			// Heartbeat scenario: round robin over the pre-opened sessions.
			p = pending{id: d.pool[int(rr.Add(1)-1)%len(d.pool)]}
		} else {
			d.mu.Lock()
			if n := len(d.ready); n > 0 {
				p = d.ready[0]
				d.ready[0] = pending{}
				d.ready = d.ready[1:]
				d.mu.Unlock()
			} else {
				d.mu.Unlock()
				p = pending{id: d.newID()}
			}
		}
		kind := d.steps[p.step]
		t.Method = http.MethodPost
		t.URL = d.base + kind.path() + "#" + p.id + "/" + strconv.Itoa(p.step)
		t.Body = d.body(kind, p.id)
		t.Header = d.header
		return nil
	}
}

func (d *driver) body(kind stepKind, id string) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"resourceName":`...)
	b = append(b, d.resource...)
	b = append(b, `,"sessionId":"`...)
	b = append(b, id...)
	b = append(b, '"')
	switch kind {
	case stepApply:
		b = append(b, `,"applyAmount":`...)
		b = strconv.AppendInt(b, d.amount, 10)
		if d.clientID != "" {
			b = append(b, `,"clientId":`...)
			b = append(b, d.clientID...)
		}
	case stepFinish:
		b = append(b, `,"actualUsedAmount":`...)
		b = strconv.AppendInt(b, d.actual, 10)
	}
	return append(b, '}')
}

// observe records one Result and, on a 2xx answer, queues the session's
// next step. It is called from the one goroutine that reads the results.
func (d *driver) observe(r *vegeta.Result) {
	s := &d.stats
	s.overall.Add(r)
	s.codes[int(r.Code)]++
	ok := r.Code >= 200 && r.Code < 300
	_, frag, found := strings.Cut(r.URL, "#")
	slash := strings.LastIndexByte(frag, '/')
	if !found || slash < 0 {
		s.badResult++
		return
	}
	id := frag[:slash]
	if ok {
		s.ok++
	} else {
		msg := r.Error
		if r.Code != 0 {
			msg = strconv.Itoa(int(r.Code)) + " " + strings.TrimSpace(string(r.Body))
		}
		// Group the same error across sessions.
		msg = string(truncate([]byte(strings.ReplaceAll(msg, id, "<id>")), 240))
		if _, seen := s.errors[msg]; seen || len(s.errors) < 16 {
			s.errors[msg]++
		}
	}
	step, err := strconv.Atoi(frag[slash+1:])
	if err != nil || step < 0 || step >= len(d.steps) {
		s.badResult++
		return
	}
	s.perStep[d.steps[step]].Add(r)
	if len(d.pool) > 0 {
		return // heartbeat scenario: no sessions to follow
	}
	if step == 0 {
		s.started++
	}
	switch {
	case !ok:
		s.aborted++
	case step+1 == len(d.steps):
		s.completed++
	default:
		d.mu.Lock()
		d.ready = append(d.ready, pending{id: id, step: step + 1})
		d.mu.Unlock()
	}
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
