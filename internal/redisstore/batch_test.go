package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/quota"
)

// Balances and BurnSamplesOf answer, for each resource, what Balance and
// BurnSamples answer (resources on several cluster slots; one without a
// balance), also right after SCRIPT FLUSH (NOSCRIPT: the batch sends the
// script again).
func TestBatchReadsAnswerWhatSingleReadsDo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		per := e.current(t)
		res := []string{e.res, newResource(t, e.rdb), newResource(t, e.rdb), newResource(t, e.rdb)}
		for i, r := range res[:3] { // res[3] has no balance
			if _, err := e.s.Seed(ctxT(t), r, per, int64(100*(i+1)), quota.PeriodTotals{Charged: int64(i)}, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
			smp := quota.BurnSample{At: e.now(t), PeriodStart: per.Start, Consumed: int64(7 * i)}
			if err := e.s.RecordBurn(ctxT(t), r, smp, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.s.Apply(ctxT(t), quota.ApplyCmd{ResourceName: res[1], SessionID: "s1", ClientID: "c", Amount: 5, Period: per, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.ScriptFlush(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		reads := make([]quota.BalanceRead, len(res))
		for i, r := range res {
			reads[i] = quota.BalanceRead{Resource: r, Period: per}
		}
		bals, errs := e.s.Balances(ctxT(t), reads)
		since := e.now(t).Add(-time.Hour)
		burns, berrs := e.s.BurnSamplesOf(ctxT(t), res, since)
		for i, r := range res {
			want, err := e.s.Balance(ctxT(t), r, per)
			if err != nil || errs[i] != nil {
				t.Fatalf("%s: Balance %v, Balances %v", r, err, errs[i])
			}
			if bals[i] != want {
				t.Errorf("%s: Balances %+v; Balance %+v", r, bals[i], want)
			}
			wantB, err := e.s.BurnSamples(ctxT(t), r, since)
			if err != nil || berrs[i] != nil {
				t.Fatalf("%s: BurnSamples %v, BurnSamplesOf %v", r, err, berrs[i])
			}
			if len(burns[i]) != len(wantB) || len(wantB) > 0 && burns[i][0] != wantB[0] {
				t.Errorf("%s: BurnSamplesOf %+v; BurnSamples %+v", r, burns[i], wantB)
			}
		}
		if !bals[1].Exists || bals[1].Reserved != 5 || bals[1].Limit != 200 || bals[3].Exists {
			t.Fatalf("balances %+v; want res[1] limit 200 reserved 5, res[3] missing", bals)
		}
	})
}

// An unreachable server fails every read of a batch with ErrUnavailable.
func TestBatchReadsOfAnUnreachableServerAreUnavailable(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
	})
	defer rdb.Close()
	s := New(rdb)
	per := quota.Period{Start: time.Now().Add(-time.Hour)}
	_, errs := s.Balances(ctxT(t), []quota.BalanceRead{{Resource: "a", Period: per}, {Resource: "b", Period: per}})
	_, berrs := s.BurnSamplesOf(ctxT(t), []string{"a", "b"}, per.Start)
	for i, err := range append(errs, berrs...) {
		if !errors.Is(err, quota.ErrUnavailable) {
			t.Errorf("read %d: %v; want ErrUnavailable", i, err)
		}
	}
}
