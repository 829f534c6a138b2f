package policysync

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Channel is the Redis pub/sub channel of policy changes; a message is the
// resource name.
const Channel = "qc:policy:changed"

// publishTimeout bounds one PUBLISH: a change already written to MySQL is
// not held up by a slow Redis (the TTL covers a message that is not sent).
const publishTimeout = time.Second

// Bus publishes and receives policy changes.
type Bus struct {
	rdb    redis.UniversalClient
	log    *zap.Logger
	forget []func(resource string)
}

// New returns a bus on rdb that calls each of forget with the resource of
// every change it receives (its own included).
func New(rdb redis.UniversalClient, log *zap.Logger, forget ...func(resource string)) *Bus {
	return &Bus{rdb: rdb, log: log, forget: forget}
}

// Changed announces that resource's policy changed, after the change is
// stored. It is best effort: when Redis does not take the message, the
// failure is logged and the other instances see the change within their
// cache TTL.
func (b *Bus) Changed(ctx context.Context, resource string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := b.rdb.Publish(ctx, Channel, resource).Err(); err != nil {
		b.log.Warn("policy change not announced; other instances see it within the policy cache TTL",
			zap.String("resource", resource), zap.Error(err))
	}
}

// subscribeTimeout bounds the wait for the first subscription's
// confirmation in Run.
const subscribeTimeout = 5 * time.Second

// Run receives changes until ctx is done or stop is called, calling the
// forget functions for each; stop also waits for the receiving goroutine to
// end. It returns once subscribed, or with the error of the first attempt
// (Redis down at start): the goroutine runs either way, and go-redis
// subscribes again by itself until it succeeds, as after a lost connection.
// What is published while not subscribed is not received.
func (b *Bus) Run(ctx context.Context) (stop func(), err error) {
	ps := b.rdb.Subscribe(ctx, Channel)
	cctx, ccancel := context.WithTimeout(ctx, subscribeTimeout)
	_, err = ps.Receive(cctx) // the subscription's confirmation
	ccancel()
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(done)
		ch := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				for _, f := range b.forget {
					f(m.Payload)
				}
			}
		}
	}()
	return func() {
		cancel()
		_ = ps.Close()
		<-done
	}, err
}
