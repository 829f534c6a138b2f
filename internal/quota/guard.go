package quota

// Breaker guards the calls to one backend; internal/breaker's circuit
// breaker is the production one. Allow says whether a call may go ahead:
// when it may not, err matches ErrCircuitOpen (a *CircuitOpenError) and the
// call is not made; when it may, done must be called once with the call's
// error, which the breaker judges.
type Breaker interface {
	Allow() (done func(err error), err error)
}

// Breakers are the breakers in front of the two backends. A nil one lets
// every call through.
type Breakers struct {
	Balances Breaker // the balance store (Redis)
	Ledger   Breaker // the ledger, policy store and audit log (MySQL)
}

// NodeBreaker is a Breaker made of one breaker per node of a backend
// (internal/breaker's per-master breakers of a Redis Cluster): For is the
// one in front of the node serving resource now. Its own Allow is for calls
// tied to no resource.
type NodeBreaker interface {
	Breaker
	For(resource string) Breaker
}

// ForResource is the breaker that guards resource's calls behind b:
// b.For(resource) when b is a NodeBreaker, else b itself (nil stays nil).
func ForResource(b Breaker, resource string) Breaker {
	if nb, ok := b.(NodeBreaker); ok {
		return nb.For(resource)
	}
	return b
}

// BalancesFor is the balance store's breaker for resource's calls
// (ForResource): on a Redis Cluster, that of the master serving it.
func (b Breakers) BalancesFor(resource string) Breaker { return ForResource(b.Balances, resource) }

// Guard makes one backend call, fn, through b (nil: no breaker). It is the
// one place a breaker is applied: every consumer of a store (the Service,
// the sweeper, reconciliation) calls the store through it, so a new store
// method needs no breaker code of its own.
func Guard[T any](b Breaker, fn func() (T, error)) (T, error) {
	if b == nil {
		return fn()
	}
	done, err := b.Allow()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := fn()
	done(err)
	return v, err
}

// GuardErr is Guard for a call that returns only an error.
func GuardErr(b Breaker, fn func() error) error {
	if b == nil {
		return fn()
	}
	done, err := b.Allow()
	if err != nil {
		return err
	}
	err = fn()
	done(err)
	return err
}
