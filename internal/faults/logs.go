package faults

import (
	"context"
	"io"
	"log"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// RedirectDriverLogs sends what the go-redis and go-sql-driver packages log
// on their own (reconnects, refused dials, bad idle connections: hundreds of
// lines during a fault) to w instead of stderr. Their loggers are global to
// the process, so call it once, from a test or main.
func RedirectDriverLogs(w io.Writer) {
	redis.SetLogger(redisLogger{log.New(w, "go-redis: ", log.LstdFlags|log.Lmicroseconds)})
	_ = mysql.SetLogger(log.New(w, "go-sql-driver: ", log.LstdFlags|log.Lmicroseconds))
}

type redisLogger struct{ l *log.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) { r.l.Printf(format, v...) }
