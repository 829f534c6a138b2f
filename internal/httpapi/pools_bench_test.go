package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	opsadmin "github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// BenchmarkApplyHandlerPlainVersusLines is one POST /quota/apply through
// the whole handler, Service, pools source, real Redis and an in-memory
// SQLite ledger: a plain resource against one with 12 business lines,
// interleaved in the same run (the bound: lines ≤ 1.2 × plain).
// It needs QC_BENCH_POOLS_REDIS=host:port, a private Redis (it is not
// flushed; every run uses fresh resource names).
//
//	QC_BENCH_POOLS_REDIS=127.0.0.1:6391 go test -run '^$' -bench HandlerPlainVersusLines -benchtime 3000x ./internal/httpapi/
func BenchmarkApplyHandlerPlainVersusLines(b *testing.B) {
	addr := os.Getenv("QC_BENCH_POOLS_REDIS")
	if addr == "" {
		b.Skip("set QC_BENCH_POOLS_REDIS to a private Redis")
	}
	for round, name := range []string{"plain", "lines12", "plain", "lines12"} {
		b.Run(name, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { _ = rdb.Close() })
			sql, err := mysqlstore.OpenSQLite(context.Background(), ":memory:", mysqlstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sql.Close() })
			if err := sql.Migrate(context.Background()); err != nil {
				b.Fatal(err)
			}
			rs := redisstore.New(rdb)
			sched := &period.Scheduler{}
			svc := quota.NewService(rs, sql, sql, sched, quota.Options{Pools: quota.PoolStores{Config: sql, Balances: rs}})
			admin := opsadmin.NewPools(sql, rs, svc, sched, nil)
			srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Metrics: httpapi.NewMetrics(prometheus.NewRegistry()), Pools: httpapi.PoolAdmin{Lines: admin, Grants: admin, Reclaims: admin}})
			h := srv.Handler()
			res := "bench-" + name + "-" + strconv.Itoa(round) + "-" + strconv.Itoa(b.N) + "-" + strconv.FormatInt(int64(os.Getpid()), 10)
			call := func(method, path, body string) *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				r := httptest.NewRequest(method, path, bytes.NewBufferString(body))
				r.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(w, r)
				return w
			}
			if w := call("PUT", "/admin/policies/"+res, `{"quotaType":"TOKENS","totalLimit":9000000000000}`); w.Code >= 300 {
				b.Fatalf("policy: %d %s", w.Code, w.Body)
			}
			body := `{"resourceName":"` + res + `","applyAmount":1}`
			if name == "lines12" {
				for _, l := range pools.LineNames(12) {
					if w := call("PUT", "/admin/policies/"+res+"/lines/"+l.Name, `{"tier":"`+string(l.Tier)+`","weight":`+strconv.FormatInt(l.Weight, 10)+`}`); w.Code >= 300 {
						b.Fatalf("line: %d %s", w.Code, w.Body)
					}
				}
				body = `{"resourceName":"` + res + `","applyAmount":1,"businessLine":"core-1"}`
			}
			b.ResetTimer()
			for range b.N {
				if w := call("POST", "/quota/apply", body); w.Code != http.StatusOK {
					b.Fatalf("apply: %d %s", w.Code, w.Body)
				}
			}
		})
	}
}
