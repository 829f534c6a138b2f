package mysqlstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkInsertSessionParallel: 64 concurrent callers each inserting new
// sessions through the group commit, as the applies of quota-center serve
// at 64 connections do; ns/op is per row. It measures this process's work
// per row (the batcher's hand-offs, database/sql, the driver) together with
// the server's statements, so compare builds by CPU or instructions of the
// test process, not by ns/op alone:
//
//	QC_TEST_MYSQL_DSN='root@tcp(127.0.0.1:13306)/' go test -run '^$' -bench InsertSessionParallel ./internal/mysqlstore/
func BenchmarkInsertSessionParallel(b *testing.B) {
	s := MustMySQL(b)
	var seq atomic.Int64
	b.SetParallelism(32) // 64 callers on 2 cores
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.InsertSession(ctx, usingRec("b-"+strconv.FormatInt(seq.Add(1), 10), 1))
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
