package faults

import (
	"context"
	"io"
	"log"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// driverLogs is where the drivers' own log lines go; the drivers' loggers
// are set once, to write here, and RedirectDriverLogs only swaps the target,
// so scenarios running in parallel never race on the drivers' globals.
var driverLogs = &swapWriter{w: io.Discard}

var setDriverLoggers sync.Once

// RedirectDriverLogs sends what the go-redis and go-sql-driver packages log
// on their own (reconnects, refused dials, bad idle connections: hundreds of
// lines during a fault) to w instead of stderr. The drivers' loggers are
// process-wide: with several callers, the last one's w gets the lines.
func RedirectDriverLogs(w io.Writer) {
	driverLogs.set(w)
	setDriverLoggers.Do(func() {
		redis.SetLogger(redisLogger{log.New(driverLogs, "go-redis: ", log.LstdFlags|log.Lmicroseconds)})
		_ = mysql.SetLogger(log.New(driverLogs, "go-sql-driver: ", log.LstdFlags|log.Lmicroseconds))
	})
}

type swapWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *swapWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *swapWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

type redisLogger struct{ l *log.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) { r.l.Printf(format, v...) }
