// Package sweeper finds sessions whose caller died: USING sessions whose
// lease (leakThresholdSeconds since the last heartbeat, on Redis TIME)
// expired. It marks them LEAKED, keeping their whole grant charged, and
// records that in the ledger.
//
// Several instances may sweep at once: the sweep script is atomic and only
// returns the sessions it moved itself, so none is swept twice, and a
// session heartbeating on time is never swept. A ledger write that fails is
// retried on the next pass (the balance store keeps the swept ids until they
// are acknowledged). Its cost grows with the expired sessions only: it reads
// the lease index up to now, never every session.
//
// It imports quota (and zap, prometheus); never redisstore or mysqlstore.
package sweeper
