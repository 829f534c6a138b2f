package quota

import "context"

// PolicyBatchReader is a policy store that reads many policies in one
// query (mysqlstore.Store.PoliciesOf: one per 500 names). Names without
// a policy are absent from the map.
type PolicyBatchReader interface {
	PoliciesOf(ctx context.Context, resources []string) (map[string]Policy, error)
}

// warm reads, in one batch, the policies of resources the cache has no
// fresh answer for and no read in flight, and stores them as get's reads
// would (a name the store does not know is forgotten; an answer changed
// or invalidated meanwhile is not overwritten). Without a
// PolicyBatchReader, or when the batch fails, it does nothing: get reads
// each as before. Issue 23 §1: a scrape's Statuses of 1,000 used resources
// found their policies expired (TTL 2 s, a scrape every 15 s) and
// refreshed each with its own query.
func (c *policyCache) warm(ctx context.Context, resources []string) {
	pb, ok := c.store.(PolicyBatchReader)
	if !ok || len(resources) == 0 {
		return
	}
	pc := c.policies
	now := c.now()
	gens := map[string]uint64{}
	var want []string
	pc.mu.Lock()
	for _, r := range resources {
		e, ok := pc.m[r]
		if _, dup := gens[r]; dup || pc.reading[r] > 0 || (ok && e.has && !e.invalid && now.Before(e.expires)) {
			continue
		}
		gens[r] = e.gen
		want = append(want, r)
		pc.reading[r]++ // an invalidate meanwhile leaves a tombstone (see load)
	}
	pc.mu.Unlock()
	if len(want) == 0 {
		return
	}
	got, err := Guard(c.mysql, func() (map[string]Policy, error) { return pb.PoliciesOf(ctx, want) })
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, r := range want {
		if pc.reading[r]--; pc.reading[r] <= 0 {
			delete(pc.reading, r)
		}
		gen := gens[r]
		e, ok := pc.m[r]
		switch {
		case ok && e.gen != gen:
			if !e.has && pc.reading[r] == 0 {
				delete(pc.m, r) // a tombstone no read needs any more
			}
			continue // invalidated (or stored) meanwhile
		case !ok && gen != 0:
			continue // its tombstone is gone: invalidated meanwhile
		case err != nil:
			continue
		}
		if p, found := got[r]; found {
			pc.seq++
			pc.m[r] = staleEntry[Policy]{v: p, has: true, expires: now.Add(pc.ttl), gen: pc.seq}
		} else {
			delete(pc.m, r)
		}
	}
}
