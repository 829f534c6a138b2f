package faults

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// WorkloadConfig shapes the clients. Zero values take the defaults.
type WorkloadConfig struct {
	Resources      []Resource    // each session picks one at random (required)
	Workers        int           // concurrent clients (16)
	AbandonRate    float64       // share of granted sessions never finished: they leak (0.02)
	OverageRate    float64       // share of finishes above the grant (0.1)
	StatusRate     float64       // share of sessions preceded by GET /quota/status (0.05)
	MaxHold        time.Duration // longest a session is held before its finish (200ms)
	RequestTimeout time.Duration // http.Client timeout: every request's deadline (5s)
	ApplyAttempts  int           // tries of one apply, same sessionId, on 503 or no answer (3)
	FinishRetryFor time.Duration // how long a client keeps retrying a finish on 503 (45s)
	Seed           uint64        // of the random choices (0 = random)
}

func (c WorkloadConfig) withDefaults() WorkloadConfig {
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.AbandonRate == 0 {
		c.AbandonRate = 0.02
	}
	if c.OverageRate == 0 {
		c.OverageRate = 0.1
	}
	if c.StatusRate == 0 {
		c.StatusRate = 0.05
	}
	if c.MaxHold <= 0 {
		c.MaxHold = 200 * time.Millisecond
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.ApplyAttempts <= 0 {
		c.ApplyAttempts = 3
	}
	if c.FinishRetryFor <= 0 {
		c.FinishRetryFor = 45 * time.Second
	}
	if c.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, x := range b {
			c.Seed = c.Seed<<8 | uint64(x)
		}
	}
	return c
}

// Answer is one HTTP exchange as the client saw it.
type Answer struct {
	Op       string // apply, heartbeat, finish, status
	Status   int    // HTTP status; 0 = no answer (see Code)
	Code     string // the body's code; CLIENT_TIMEOUT or NO_ANSWER when Status is 0
	Message  string // the body's message (errors) or the transport error
	Session  string
	Sent     time.Time
	Deadline time.Time // Sent + RequestTimeout: the answer had to come before it
	Latency  time.Duration
}

// Session is one session as its client saw it.
type Session struct {
	ID, Resource, Client string
	Amount, Min          int64

	ApplyTries int
	Applied    bool   // an apply answered 200
	Granted    int64  // its grantedAmount
	ApplyLast  string // "status CODE" of the last apply answer

	Abandoned    bool // granted, never finished (left to leak)
	Heartbeats   int
	Heartbeat404 int // heartbeats answered 404 SESSION_NOT_FOUND while the grant was held

	Actual      int64
	FinishTries int
	Finished    bool   // a finish answered 200
	FinishLast  string // "status CODE" of the last finish answer
	// The 200 finish answer.
	FinishGranted, Charged, Refunded, Overage int64
}

// Recorder keeps every answer and session. Safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	answers  []Answer
	sessions []*Session
}

func (r *Recorder) add(a Answer) {
	r.mu.Lock()
	r.answers = append(r.answers, a)
	r.mu.Unlock()
}

func (r *Recorder) addSession(s *Session) {
	r.mu.Lock()
	r.sessions = append(r.sessions, s)
	r.mu.Unlock()
}

// Answers returns a copy of the answers so far.
func (r *Recorder) Answers() []Answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Answer(nil), r.answers...)
}

// Sessions returns the sessions; read them only after Workload.Stop.
func (r *Recorder) Sessions() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Session(nil), r.sessions...)
}

// Timeline is the answers of one session, oldest first, as
// "15:04:05.000 finish 503 CODE (12ms)" items.
func (r *Recorder) Timeline(session string) string {
	var parts []string
	for _, a := range r.Answers() {
		if a.Session != session {
			continue
		}
		st := fmt.Sprint(a.Status)
		if a.Status == 0 {
			st = "-"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s %s (%s)", a.Sent.Format("15:04:05.000"), a.Op, st, a.Code, a.Latency.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// Table formats the answers counted by operation, HTTP status and body
// code, with the slowest answer of each.
func (r *Recorder) Table() string {
	type key struct {
		op     string
		status int
		code   string
	}
	type row struct {
		n       int
		slowest time.Duration
	}
	rows := map[key]*row{}
	total := 0
	for _, a := range r.Answers() {
		k := key{a.Op, a.Status, a.Code}
		if rows[k] == nil {
			rows[k] = &row{}
		}
		rows[k].n++
		rows[k].slowest = max(rows[k].slowest, a.Latency)
		total++
	}
	keys := make([]key, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	order := map[string]int{"apply": 0, "heartbeat": 1, "finish": 2, "status": 3}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.op != b.op {
			return order[a.op] < order[b.op]
		}
		if a.status != b.status {
			return a.status < b.status
		}
		return a.code < b.code
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %6s  %-24s %8s  %s\n", "operation", "status", "code", "answers", "slowest")
	for _, k := range keys {
		st := fmt.Sprint(k.status)
		if k.status == 0 {
			st = "-"
		}
		fmt.Fprintf(&b, "%-10s %6s  %-24s %8d  %s\n", k.op, st, k.code, rows[k].n, rows[k].slowest.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "%-10s %6s  %-24s %8d\n", "total", "", "", total)
	return b.String()
}

// Workload runs the clients until Stop.
type Workload struct {
	env    *Env
	cfg    WorkloadConfig
	rec    *Recorder
	client *http.Client
	tag    string
	stop   chan struct{}
	wg     sync.WaitGroup
	start  time.Time
}

// StartWorkload starts cfg.Workers clients, each running sessions one after
// the other: apply (retried with the same sessionId on 503), a hold with
// 0–2 heartbeats, then finish (retried with the same body on 503 until 200
// or FinishRetryFor) — or, for AbandonRate of the grants, no finish at all.
func (e *Env) StartWorkload(cfg WorkloadConfig) (*Workload, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Resources) == 0 {
		return nil, errors.New("faults: WorkloadConfig.Resources is empty")
	}
	var tag [3]byte
	_, _ = rand.Read(tag[:])
	w := &Workload{
		env: e, cfg: cfg, rec: &Recorder{}, tag: hex.EncodeToString(tag[:]), stop: make(chan struct{}),
		client: &http.Client{
			Timeout:   cfg.RequestTimeout,
			Transport: &http.Transport{MaxIdleConns: 4 * cfg.Workers, MaxIdleConnsPerHost: 4 * cfg.Workers},
		},
		start: time.Now(),
	}
	for i := range cfg.Workers {
		w.wg.Add(1)
		go w.worker(i)
	}
	e.logf.printf("faults: %d clients started (seed %d)", cfg.Workers, cfg.Seed)
	return w, nil
}

// Config is the effective configuration (defaults filled in).
func (w *Workload) Config() WorkloadConfig { return w.cfg }

// Recorder is where the answers go.
func (w *Workload) Recorder() *Recorder { return w.rec }

// Stop lets every client end its session (a finish is still retried) and
// waits for them, at most FinishRetryFor plus a minute.
func (w *Workload) Stop() error {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		w.client.CloseIdleConnections()
		w.env.logf.printf("faults: clients stopped after %s", time.Since(w.start).Round(time.Millisecond))
		return nil
	case <-time.After(w.cfg.FinishRetryFor + time.Minute):
		return errors.New("faults: clients did not stop in time")
	}
}

func (w *Workload) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// call sends one request and records the answer; out is the decoded body
// (nil without an answer).
func (w *Workload) call(op, method, path string, body any, session string) (Answer, map[string]any) {
	a := Answer{Op: op, Session: session, Sent: time.Now()}
	a.Deadline = a.Sent.Add(w.cfg.RequestTimeout)
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, w.env.URL+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := w.client.Do(req)
	var raw []byte
	if err == nil {
		raw, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	a.Latency = time.Since(a.Sent)
	if err != nil {
		a.Code, a.Message = "NO_ANSWER", err.Error()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			a.Code = "CLIENT_TIMEOUT"
		}
		w.rec.add(a)
		return a, nil
	}
	a.Status = resp.StatusCode
	out := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if derr := dec.Decode(&out); derr != nil {
		a.Code, a.Message = "NOT_JSON", strings.TrimSpace(string(raw))
	} else {
		a.Code, _ = out["code"].(string)
		if a.Status != http.StatusOK {
			a.Message, _ = out["message"].(string)
		}
	}
	w.rec.add(a)
	return a, out
}

func num(m map[string]any, k string) int64 {
	n, _ := m[k].(json.Number)
	v, _ := n.Int64()
	return v
}

func sleep(rng *mrand.Rand, lo, hi time.Duration) {
	d := lo
	if hi > lo {
		d += time.Duration(rng.Int64N(int64(hi - lo)))
	}
	time.Sleep(d)
}

func (w *Workload) worker(id int) {
	defer w.wg.Done()
	rng := mrand.New(mrand.NewPCG(w.cfg.Seed, uint64(id)+1))
	client := fmt.Sprintf("w%02d", id)
	for n := 0; !w.stopping(); n++ {
		res := w.cfg.Resources[rng.IntN(len(w.cfg.Resources))]
		s := &Session{ID: fmt.Sprintf("%s-%s-%06d", w.tag, client, n), Resource: res.Name, Client: client}
		s.Amount = 1 + rng.Int64N(max(1, res.MaxAmount))
		if rng.IntN(4) == 0 {
			s.Min = 1 + rng.Int64N(s.Amount) // a partial grant is acceptable
		}
		w.rec.addSession(s)
		if rng.Float64() < w.cfg.StatusRate {
			w.call("status", http.MethodGet, "/quota/status?resourceName="+res.Name, nil, "")
		}
		w.apply(s, rng)
		if !s.Applied {
			sleep(rng, 10*time.Millisecond, 60*time.Millisecond)
			continue
		}
		if rng.Float64() < w.cfg.AbandonRate {
			s.Abandoned = true // the client "crashed": the sweeper must find it
			continue
		}
		hold := time.Duration(rng.Int64N(int64(w.cfg.MaxHold) + 1))
		beats := rng.IntN(3)
		for range beats {
			time.Sleep(hold / time.Duration(beats+1))
			s.Heartbeats++
			a, _ := w.call("heartbeat", http.MethodPost, "/quota/heartbeat",
				map[string]any{"resourceName": s.Resource, "sessionId": s.ID}, s.ID)
			if a.Status == http.StatusNotFound {
				s.Heartbeat404++
			}
		}
		time.Sleep(hold / time.Duration(beats+1))
		g := s.Granted
		switch r := rng.Float64(); {
		case r < w.cfg.OverageRate:
			s.Actual = g + 1 + rng.Int64N(max(1, g/2))
		case r < w.cfg.OverageRate+0.15:
			s.Actual = g
		case r < w.cfg.OverageRate+0.25:
			s.Actual = 0
		default:
			s.Actual = rng.Int64N(g + 1)
		}
		w.finish(s, rng)
	}
}

// apply asks for s.Amount, retrying with the same sessionId (idempotent)
// on 503 or no answer.
func (w *Workload) apply(s *Session, rng *mrand.Rand) {
	body := map[string]any{"resourceName": s.Resource, "applyAmount": s.Amount, "sessionId": s.ID, "clientId": s.Client}
	if s.Min > 0 {
		body["minAmount"] = s.Min
	}
	for s.ApplyTries < w.cfg.ApplyAttempts {
		s.ApplyTries++
		a, out := w.call("apply", http.MethodPost, "/quota/apply", body, s.ID)
		s.ApplyLast = fmt.Sprintf("%d %s", a.Status, a.Code)
		switch a.Status {
		case http.StatusOK:
			s.Applied, s.Granted = true, num(out, "grantedAmount")
			return
		case http.StatusServiceUnavailable, 0:
			sleep(rng, time.Duration(s.ApplyTries)*100*time.Millisecond, time.Duration(s.ApplyTries)*300*time.Millisecond)
		default:
			return // 429 exhausted, or an answer that is not worth a retry
		}
	}
}

// finish reports s.Actual, retrying the same body on 503 or no answer for
// up to FinishRetryFor: what a careful client does.
func (w *Workload) finish(s *Session, rng *mrand.Rand) {
	body := map[string]any{"resourceName": s.Resource, "sessionId": s.ID, "actualUsedAmount": s.Actual}
	giveUp := time.Now().Add(w.cfg.FinishRetryFor)
	backoff := 50 * time.Millisecond
	for {
		s.FinishTries++
		a, out := w.call("finish", http.MethodPost, "/quota/finish", body, s.ID)
		s.FinishLast = fmt.Sprintf("%d %s", a.Status, a.Code)
		if a.Status == http.StatusOK {
			s.Finished = true
			s.FinishGranted, s.Charged = num(out, "grantedAmount"), num(out, "chargedAmount")
			s.Refunded, s.Overage = num(out, "refundedAmount"), num(out, "overageAmount")
			return
		}
		if (a.Status != http.StatusServiceUnavailable && a.Status != 0) || time.Now().After(giveUp) {
			return
		}
		sleep(rng, backoff, 2*backoff)
		backoff = min(2*backoff, time.Second)
	}
}
