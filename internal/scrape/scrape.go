package scrape

import "golang.org/x/sync/errgroup"

// Workers bounds the resources one scrape reads at once: reads one after
// another took 1.03 s for 1,000 used resources (issue 23 §1), and no more
// than Workers of the Redis client's connections (QC_REDIS_POOL_SIZE, 64
// by default) wait on a scrape.
const Workers = 32

// Each calls read for every item, at most Workers at once, and returns
// when all have returned. read handles its own errors (a collector counts
// them and leaves that resource out); it must be safe to call
// concurrently (a collector's sends on its metric channel are).
func Each[T any](items []T, read func(T)) {
	var g errgroup.Group
	g.SetLimit(Workers)
	for _, it := range items {
		g.Go(func() error {
			read(it)
			return nil
		})
	}
	_ = g.Wait()
}
