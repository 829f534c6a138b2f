package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// WithFailOpenSpool keeps the usage reports the center has not taken yet
// (fail-open leases, finishes that failed, LocalPool safe-rate usage) in an
// append-only file of dir as well as in memory, so that a process that
// dies before the center is back does not lose them: the next Manager
// started on the same dir (in this process or another) replays them. Each
// Manager writes its own file, <dir>/<uuidv7>.spool, one JSON record a line,
// fsynced before the call that produced the report returns, and holds an
// exclusive lock (flock) on it while it lives; on start and every report
// interval a Manager adopts the files whose lock is free (their process is
// gone): it copies their undelivered reports into its own file, removes
// theirs, and sends the reports. A report is sent under the session id the
// client made for it, and apply and finish are idempotent by session id, so
// a replay is charged exactly once. A fail-open lease still open when its
// process died is charged its whole grant (its usage is unknown, as the
// center's leak sweeper charges a leaked session). A LocalPool's safe-rate
// usage is written every second, so a process killed in an outage loses at
// most its last second of it.
//
// dir is created (mode 0700) if needed; it must be on a local file system
// (flock), and may be shared by the Managers of several processes. Unix
// only: elsewhere NewManager refuses the option.
func WithFailOpenSpool(dir string) ManagerOption {
	return func(c *managerConfig) error {
		if strings.TrimSpace(dir) == "" {
			return optionError("WithFailOpenSpool", "empty directory")
		}
		c.spoolDir = dir
		return nil
	}
}

// Spool record ops.
const (
	spoolReport = "report" // a report to send
	spoolOpen   = "open"   // a fail-open lease in use: if its process dies, charge apply
	spoolDone   = "done"   // the report of id was delivered (or dropped for good)
)

// spoolRecord is one line of a spool file.
type spoolRecord struct {
	Op       string `json:"op"`
	ID       string `json:"id"` // the report's session id
	Resource string `json:"resource,omitempty"`
	Apply    int64  `json:"apply,omitempty"`
	Used     int64  `json:"used,omitempty"`
	Orphan   bool   `json:"orphan,omitempty"`
}

func (r spoolRecord) report() report {
	return report{resource: r.Resource, sessionID: r.ID, apply: r.Apply, used: r.Used, orphan: r.Orphan}
}

// errSpoolClosed: the Manager closed while a call was under way; what the
// call would record is settled in memory by Close.
var errSpoolClosed = errors.New("spool closed")

// spool is a Manager's durable copy of its reports (WithFailOpenSpool).
type spool struct {
	dir  string
	path string
	log  *slog.Logger

	mu   sync.Mutex
	f    *os.File            // nil once closed
	live map[string]struct{} // ids whose last record is not done
}

// openSpool creates the Manager's own spool file in dir and locks it.
func openSpool(dir string, log *slog.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Created and locked under a name adopt does not look at, then renamed:
	// no other Manager can take the file for a dead one's in between.
	id := newSessionID()
	tmp, path := filepath.Join(dir, "."+id+".new"), filepath.Join(dir, id+".spool")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*spool, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := lockFile(f); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		_ = os.Remove(path)
		return fail(err)
	}
	return &spool{dir: dir, path: path, log: log, f: f, live: map[string]struct{}{}}, nil
}

// write appends recs to the file and fsyncs it.
func (s *spool) write(recs ...spoolRecord) error {
	var buf bytes.Buffer
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errSpoolClosed
	}
	if _, err := s.f.Write(buf.Bytes()); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	for _, r := range recs {
		if r.Op == spoolDone {
			delete(s.live, r.ID)
		} else {
			s.live[r.ID] = struct{}{}
		}
	}
	if len(s.live) == 0 { // everything delivered: start the file afresh
		if err := s.f.Truncate(0); err == nil {
			_ = s.f.Sync()
		}
	}
	return nil
}

// record writes recs, logging a failure (the reports stay in memory).
func (s *spool) record(recs ...spoolRecord) {
	if s == nil {
		return
	}
	if err := s.write(recs...); err != nil && !errors.Is(err, errSpoolClosed) {
		s.log.Error("quota-center client: spool write failed; the report is kept in memory only", "spool", s.path, "err", err)
	}
}

// adopt takes over the spool files of the Managers that are gone (their
// lock is free): their undelivered reports are copied into this Manager's
// file, then their files removed. It returns the reports to send.
func (s *spool) adopt() []report {
	paths, err := filepath.Glob(filepath.Join(s.dir, "*.spool"))
	if err != nil {
		return nil
	}
	sort.Strings(paths) // UUIDv7 names: oldest first
	var out []report
	for _, p := range paths {
		if p == s.path {
			continue
		}
		recs, ok := s.adoptFile(p)
		if !ok {
			continue
		}
		for _, r := range recs {
			out = append(out, r.report())
		}
	}
	return out
}

// adoptFile adopts one file when its owner is gone; ok false when it is
// alive (locked), already adopted by another Manager, or unreadable.
func (s *spool) adoptFile(path string) (recs []spoolRecord, ok bool) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close() // after the removal: a Manager that opened it meanwhile then finds it gone
	if lockFile(f) != nil {
		return nil, false // its Manager is alive
	}
	fi, err1 := f.Stat()
	cur, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(fi, cur) {
		return nil, false // adopted and removed by another Manager before we locked it
	}
	recs, skipped := readSpool(f)
	if skipped > 0 {
		s.log.Warn("quota-center client: spool lines unreadable (a write cut by a crash?), skipped", "spool", path, "lines", skipped)
	}
	if len(recs) > 0 {
		if err := s.write(recs...); err != nil {
			s.log.Error("quota-center client: cannot adopt spool", "spool", path, "err", err)
			return nil, false
		}
	}
	if err := os.Remove(path); err != nil {
		s.log.Error("quota-center client: adopted spool not removed (its reports may be sent again; repeats are charged once)", "spool", path, "err", err)
	}
	_ = syncDir(s.dir)
	if len(recs) > 0 {
		s.log.Info("quota-center client: adopted the usage reports of a Manager that is gone", "spool", path, "reports", len(recs))
	}
	return recs, true
}

// readSpool folds a spool file into its undelivered reports, in order: the
// last record of an id wins, done removes it, and a fail-open lease still
// open becomes the report of its whole grant. Unreadable lines (a torn
// last write) are skipped and counted.
func readSpool(f *os.File) (recs []spoolRecord, skipped int) {
	last := map[string]int{}
	var order []spoolRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r spoolRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.ID == "" {
			skipped++
			continue
		}
		switch r.Op {
		case spoolDone:
			if i, ok := last[r.ID]; ok {
				order[i].Op = spoolDone
			}
			delete(last, r.ID)
			continue
		case spoolOpen:
			r.Op, r.Used = spoolReport, r.Apply
		case spoolReport:
		default:
			skipped++
			continue
		}
		if i, ok := last[r.ID]; ok {
			order[i] = r
			continue
		}
		last[r.ID] = len(order)
		order = append(order, r)
	}
	if sc.Err() != nil {
		skipped++
	}
	for _, r := range order {
		if r.Op != spoolDone {
			recs = append(recs, r)
		}
	}
	return recs, skipped
}

// close releases the file: removed when nothing in it is undelivered, else
// left for the next Manager on the dir. It returns how many reports stay.
func (s *spool) close() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return len(s.live)
	}
	n := len(s.live)
	if n == 0 {
		_ = os.Remove(s.path)
	}
	_ = s.f.Close()
	s.f = nil
	return n
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
