package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The scrape-time batch reads (issue 23 §1): a scrape right after a load
// reads every used resource's balance and burn samples; one call per
// resource, 32 at a time, was ~31 rounds of round trips for 1,000
// resources (2.2 s on a loaded machine). These send the reads of a batch
// in pipelines of at most BatchSize calls, the pipelines at once: one
// round trip for up to BatchSize resources (on a Redis Cluster, the
// client splits each pipeline by master and sends the parts at once).

// BatchSize is the most reads in one pipeline of a batch read.
const BatchSize = 500

// batchPipelines is the most pipelines of one batch read in flight at once.
const batchPipelines = 4

// Balances reads the balances of reads (what Balance reads, each), in
// pipelines of BatchSize. The i-th answer and error are reads[i]'s; an
// error wraps quota.ErrUnavailable when Redis did not answer (the
// pipeline's, for each of its reads).
func (s *Store) Balances(ctx context.Context, reads []quota.BalanceRead) ([]quota.Balance, []error) {
	out, errs := make([]quota.Balance, len(reads)), make([]error, len(reads))
	vals := s.batch(ctx, len(reads), errs, func(ctx context.Context, p redis.Pipeliner, i int) redis.Cmder {
		r := reads[i]
		return balanceScript.EvalSha(ctx, p, balanceKeys(r))
	}, func(ctx context.Context, p redis.Pipeliner, i int) redis.Cmder { // the script not loaded on that server yet
		r := reads[i]
		return balanceScript.Eval(ctx, p, balanceKeys(r))
	})
	for i, c := range vals {
		if errs[i] != nil {
			errs[i] = wrap("balance", errs[i])
			continue
		}
		b, err := decodeBalance(c.(*redis.Cmd).Val())
		if err != nil {
			errs[i] = wrap("balance", err)
			continue
		}
		out[i] = b
	}
	return out, errs
}

// balanceKeys are balance.lua's keys for r, as Balance passes them.
func balanceKeys(r quota.BalanceRead) []string {
	return []string{limitKey(r.Resource), balanceKey(r.Resource, r.Period.ID()), leasesKey(r.Resource), grantsKey(r.Resource)}
}

// BurnSamplesOf reads the burn samples since since of each of resources
// (what BurnSamples reads, each), in pipelines of BatchSize. The i-th
// answer and error are resources[i]'s.
func (s *Store) BurnSamplesOf(ctx context.Context, resources []string, since time.Time) ([][]quota.BurnSample, []error) {
	out, errs := make([][]quota.BurnSample, len(resources)), make([]error, len(resources))
	by := &redis.ZRangeBy{Min: strconv.FormatInt(since.UnixMilli(), 10), Max: "+inf"}
	vals := s.batch(ctx, len(resources), errs, func(ctx context.Context, p redis.Pipeliner, i int) redis.Cmder {
		return p.ZRangeByScore(ctx, burnKey(resources[i]), by)
	}, nil)
	for i, c := range vals {
		if errs[i] != nil {
			errs[i] = wrap("burn samples", errs[i])
			continue
		}
		out[i], errs[i] = decodeBurnSamples(c.(*redis.StringSliceCmd).Val())
	}
	return out, errs
}

// batch queues n commands (cmd(i) for each i) in pipelines of BatchSize,
// sends up to batchPipelines of them at once, and returns each command
// with its error in errs[i]. A command whose server answered NOSCRIPT is
// sent again with retry (the script's EVAL, which loads it), in one more
// pipeline; retry nil sends none.
func (s *Store) batch(ctx context.Context, n int, errs []error,
	cmd, retry func(ctx context.Context, p redis.Pipeliner, i int) redis.Cmder) []redis.Cmder {
	cmds := make([]redis.Cmder, n)
	send := func(idx []int, make func(ctx context.Context, p redis.Pipeliner, i int) redis.Cmder) {
		var g errgroup.Group
		g.SetLimit(batchPipelines)
		for lo := 0; lo < len(idx); lo += BatchSize {
			part := idx[lo:min(lo+BatchSize, len(idx))]
			g.Go(func() error {
				p := s.rdb.Pipeline()
				for _, i := range part {
					cmds[i] = make(ctx, p, i)
				}
				_, _ = p.Exec(ctx) // each command keeps its own error
				for _, i := range part {
					errs[i] = cmds[i].Err()
				}
				return nil
			})
		}
		_ = g.Wait()
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	send(all, cmd)
	if retry != nil {
		var again []int
		for i, err := range errs {
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				again = append(again, i)
			}
		}
		if len(again) > 0 {
			send(again, retry)
		}
	}
	for _, err := range errs {
		if err != nil && !isScriptError(err) {
			relearnSlots(ctx, s.rdb, err) // a moved slot: the next scrape asks its new master
			break
		}
	}
	return cmds
}
