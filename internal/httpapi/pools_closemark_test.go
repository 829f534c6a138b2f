package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	opsadmin "github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/pools"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// dyingLineStore is the policy store of an instance that stops in the
// middle of a line's DELETE: the decision runs (the line is marked
// closing in Redis, its sessions counted), then the transaction fails and
// is rolled back, as when MySQL fails or the process is killed.
type dyingLineStore struct{ *mysqlstore.Store }

func (s dyingLineStore) ChangePools(ctx context.Context, resource string, since int64, at time.Time,
	decide func(pools.State) (pools.Change, error), then func() error) (bool, error) {
	return s.Store.ChangePools(ctx, resource, since, at, func(st pools.State) (pools.Change, error) {
		if _, err := decide(st); err != nil {
			return pools.Change{}, err
		}
		return pools.Change{}, errors.New("the instance stopped")
	}, nil)
}

// goneRedis is that instance's Redis after it stopped: nothing it would
// have done after the mark (taking it off) happens.
type goneRedis struct{ *redisstore.Store }

func (goneRedis) EndClosing(context.Context, string, string, int64, bool) error {
	return errors.New("the instance stopped")
}

// TestALineDeleteThatDiesFreesTheLineWithinTheBound: an instance that dies
// after its DELETE of a line marked the line closing used to leave the
// mark for good: every apply on the line answered 409 "business line is
// being deleted" until an operator PUT or DELETEd it again. Now the mark
// is a lease: the applies through the server are refused until the dying
// DELETE's bound (here 3 s) has passed by Redis' clock and granted after
// it, and the line is then deleted normally. Dev mode (miniredis' clock is
// set, SQLite) and real Redis and MariaDB (the test waits for Redis' clock
// to pass the mark's deadline, read from Redis).
func TestALineDeleteThatDiesFreesTheLineWithinTheBound(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient, sql *mysqlstore.Store, mr *miniredis.Miniredis, res string) {
		a := startPoolsAPI(t, rdb, sql)
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`)
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/keep", body: `{"tier":"CORE","weight":1}`})
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/gone", body: `{"tier":"GROWTH","weight":1}`})

		rs := redisstore.New(rdb)
		sched := &period.Scheduler{}
		svc := quota.NewService(rs, sql, sql, sched, quota.Options{Pools: quota.PoolStores{Config: sql, Balances: rs}})
		dying := opsadmin.NewPools(dyingLineStore{sql}, goneRedis{rs}, svc, sched, nil)
		dying.SetLineCloseBound(3 * time.Second)
		if err := dying.DeleteLine(t.Context(), res, "gone"); err == nil {
			t.Fatal("the dying DELETE answered nil")
		}
		apply := func(id string) reply {
			return a.post(t, "/quota/apply", fmt.Sprintf(
				`{"resourceName":%q,"applyAmount":1,"clientId":"c","businessLine":"gone","sessionId":%q}`, res, id))
		}
		if r := apply("s1"); r.status != http.StatusConflict || r.body["code"] != "CONFLICT" {
			t.Fatalf("apply right after the dying DELETE: %d %s, want 409", r.status, r.raw)
		}
		v, err := rdb.HGet(t.Context(), "qc:{"+res+"}:pl", "cl:gone").Result()
		if err != nil {
			t.Fatal(err)
		}
		deadline, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("the mark %q is not a deadline", v)
		}
		if mr != nil {
			mr.SetTime(time.UnixMilli(deadline))
		}
		for give := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			now, err := rdb.Time(t.Context()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if now.UnixMilli() >= deadline {
				break
			}
			if time.Now().After(give) {
				t.Fatalf("Redis' clock did not reach the mark's deadline %d", deadline)
			}
		}
		r := apply("s2")
		if r.status != http.StatusOK {
			t.Fatalf("apply once the bound passed: %d %s, want 200 (the mark outlived its DELETE)", r.status, r.raw)
		}
		a.mustOK(t, request{method: http.MethodPost, path: "/quota/finish",
			body: fmt.Sprintf(`{"resourceName":%q,"sessionId":"s2","actualUsedAmount":1}`, res)})
		a.mustOK(t, request{method: http.MethodDelete, path: base + "/lines/gone"})
		if r := apply("s3"); r.status/100 != 4 {
			t.Fatalf("apply on the deleted line: %d %s, want 4xx", r.status, r.raw)
		}
	}
	t.Run("dev", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		run(t, rdb, newSQLite(t), mr, "cm")
	})
	t.Run("real", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: testenv.MustRedis(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		sql, err := mysqlstore.Open(t.Context(), testenv.MustMySQL(t), mysqlstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sql.Close() })
		if err := sql.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		run(t, rdb, sql, nil, testenv.Resource(t))
	})
}
