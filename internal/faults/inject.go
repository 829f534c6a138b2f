package faults

import (
	"context"
	"fmt"
	"time"
)

// Fault is one way of breaking a backend.
type Fault string

// The faults of issue 3 §8 (plus FLUSHALL, another way of losing Redis).
const (
	// RedisPause: CLIENT PAUSE ALL for longer than the service's Redis
	// timeout; commands hang, then time out (go-redis retries them).
	RedisPause Fault = "redis-pause"
	// RedisRestartEmpty: redis-server SIGKILLed and started again with
	// nothing: balances, sessions, limits and the script cache are gone.
	RedisRestartEmpty Fault = "redis-restart-empty"
	// RedisRestartBehindProxy: RedisRestartEmpty with the proxy still
	// accepting connections and closing them while Redis is down, as a
	// TCP proxy or sidecar in front of Redis does (not in AllFaults).
	RedisRestartBehindProxy Fault = "redis-restart-behind-proxy"
	// RedisFlushAll: FLUSHALL on a running Redis (keys gone, scripts kept).
	RedisFlushAll Fault = "redis-flushall"
	// RedisScriptFlush: SCRIPT FLUSH; the next EVALSHA answers NOSCRIPT.
	RedisScriptFlush Fault = "redis-script-flush"
	// RedisSlowReplies: for a window, every reply Redis sends is held back
	// past the service's timeout (the command ran): go-redis sends it again.
	RedisSlowReplies Fault = "redis-slow-replies"
	// MySQLKillConnections: KILL of every connection of the service's pool.
	MySQLKillConnections Fault = "mysql-kill-connections"
	// MySQLRestart: mariadbd shut down (SIGTERM) and started again.
	MySQLRestart Fault = "mysql-restart"
	// MySQLLostReplies: for a window, every answer MariaDB sends is lost
	// with its connection: the statement ran, the service cannot tell.
	MySQLLostReplies Fault = "mysql-lost-replies"
)

// AllFaults lists the faults drawn by default (every Fault but
// RedisRestartBehindProxy, a deployment variant).
var AllFaults = []Fault{
	RedisPause, RedisRestartEmpty, RedisFlushAll, RedisScriptFlush, RedisSlowReplies,
	MySQLKillConnections, MySQLRestart, MySQLLostReplies,
}

// KnownFaults lists every Fault: AllFaults and the deployment variants.
var KnownFaults = append(append([]Fault(nil), AllFaults...), RedisRestartBehindProxy)

// FaultTimings size the faults.
type FaultTimings struct {
	RedisPause time.Duration // CLIENT PAUSE length (past the 200ms client timeout)
	RedisDown  time.Duration // between the kill and the new start
	MySQLDown  time.Duration // between the stop and the new start
	ReplyDelay time.Duration // how late a Redis reply arrives (past the 200ms client timeout)
	SlowFor    time.Duration // how long replies are late
	LoseFor    time.Duration // how long MySQL answers are lost
}

// DefaultFaultTimings: a pause of 7.5 Redis timeouts, a second of Redis
// down, two seconds of MySQL down (plus its stop and start times), replies
// twice the Redis timeout late for a second, a tenth of a second of lost
// MySQL answers.
var DefaultFaultTimings = FaultTimings{
	RedisPause: 1500 * time.Millisecond, RedisDown: time.Second, MySQLDown: 2 * time.Second,
	ReplyDelay: 400 * time.Millisecond, SlowFor: time.Second, LoseFor: 100 * time.Millisecond,
}

// Injection records one injected fault.
type Injection struct {
	Fault  Fault
	At     time.Time     // when it began
	Took   time.Duration // until the backend was back (about 0 for instant faults)
	Detail string
	Err    error
}

func (i Injection) String() string {
	s := fmt.Sprintf("%-24s at %s took %-7s %s", i.Fault, i.At.Format("15:04:05.000"), i.Took.Round(time.Millisecond), i.Detail)
	if i.Err != nil {
		s += " ERROR: " + i.Err.Error()
	}
	return s
}

// Inject breaks a backend and returns once it is back: after the pause,
// after the restart, or at once for the instant faults (KILL, flushes).
func (e *Env) Inject(ctx context.Context, f Fault, t FaultTimings) Injection {
	in := Injection{Fault: f, At: time.Now()}
	switch f {
	case RedisPause:
		if in.Err = e.Redis.Pause(ctx, t.RedisPause); in.Err == nil {
			select { // the pause runs out by itself
			case <-ctx.Done():
			case <-time.After(t.RedisPause):
			}
		}
		in.Detail = fmt.Sprintf("CLIENT PAUSE %d ALL", t.RedisPause.Milliseconds())
	case RedisRestartEmpty:
		e.Proxy.Suspend() // refused while down, as without the proxy
		in.Err = e.Redis.Restart(ctx, t.RedisDown)
		if rerr := e.Proxy.Resume(); in.Err == nil {
			in.Err = rerr
		}
		in.Detail = fmt.Sprintf("SIGKILL, %s down, started empty", t.RedisDown)
	case RedisRestartBehindProxy:
		in.Err = e.Redis.Restart(ctx, t.RedisDown)
		in.Detail = fmt.Sprintf("SIGKILL, %s down (the proxy accepting and closing), started empty", t.RedisDown)
	case RedisSlowReplies:
		e.Proxy.DelayReplies(t.ReplyDelay, t.SlowFor)
		select {
		case <-ctx.Done():
		case <-time.After(t.SlowFor + t.ReplyDelay):
		}
		in.Detail = fmt.Sprintf("replies %s late for %s", t.ReplyDelay, t.SlowFor)
	case RedisFlushAll:
		in.Err = e.Redis.FlushAll(ctx)
		in.Detail = "FLUSHALL"
	case RedisScriptFlush:
		in.Err = e.Redis.ScriptFlush(ctx)
		in.Detail = "SCRIPT FLUSH"
	case MySQLKillConnections:
		n, err := e.MariaDB.KillConnections(ctx, e.Database)
		in.Err = err
		in.Detail = fmt.Sprintf("KILL of %d connections", n)
	case MySQLLostReplies:
		e.SQLProxy.DropReplies(t.LoseFor)
		select {
		case <-ctx.Done():
		case <-time.After(t.LoseFor):
		}
		in.Detail = fmt.Sprintf("answers lost for %s (%d connections cut)", t.LoseFor, e.SQLProxy.Dropped())
	case MySQLRestart:
		if in.Err = e.MariaDB.Stop(); in.Err == nil {
			e.SQLProxy.Suspend() // refused while down, as without the proxy
			select {
			case <-ctx.Done():
			case <-time.After(t.MySQLDown):
			}
			in.Err = e.MariaDB.Start(ctx)
			if rerr := e.SQLProxy.Resume(); in.Err == nil {
				in.Err = rerr
			}
		}
		in.Detail = fmt.Sprintf("SIGTERM, %s down, started", t.MySQLDown)
	default:
		in.Err = fmt.Errorf("unknown fault %q", f)
	}
	in.Took = time.Since(in.At)
	e.logf.printf("faults: injected %s", in)
	return in
}
