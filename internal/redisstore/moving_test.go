package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

// serverErr is an error reply of a Redis server (go-redis's redis.Error).
type serverErr string

func (e serverErr) Error() string { return string(e) }
func (serverErr) RedisError()     {}

func TestSlotMovingAnswersAreUnavailableButNotFailures(t *testing.T) {
	tests := []struct {
		give   error
		moving bool
		unav   bool
	}{
		{serverErr("MOVED 3999 127.0.0.1:7001"), true, true},
		{serverErr("ASK 3999 127.0.0.1:7001"), true, true},
		{serverErr("TRYAGAIN Multiple keys request during rehashing of slot"), true, true},
		{serverErr("CLUSTERDOWN Hash slot not served"), true, true},
		{serverErr("CLUSTERDOWN The cluster is down"), false, true},
		{serverErr("LOADING Redis is loading the dataset in memory"), false, true},
		{context.DeadlineExceeded, false, true},
		{serverErr("ERR user_script:1: boom"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.give.Error(), func(t *testing.T) {
			err := wrap("apply", tt.give)
			if got := errors.Is(err, quota.ErrSlotMoving); got != tt.moving {
				t.Errorf("errors.Is(%v, ErrSlotMoving) = %v, want %v", err, got, tt.moving)
			}
			if got := errors.Is(err, quota.ErrUnavailable); got != tt.unav {
				t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, got, tt.unav)
			}
		})
	}
}

// Every hot-path answer goes through slotMoving (retryMoving): a success
// is not moving and costs no allocation (redis.HasErrorPrefix's errors.As
// target escapes: four allocations per answer before the nil check).
func TestSlotMovingOfASuccessIsFalseWithoutAllocating(t *testing.T) {
	if slotMoving(nil) {
		t.Fatal("slotMoving(nil) = true")
	}
	if n := testing.AllocsPerRun(100, func() { slotMoving(nil) }); n != 0 {
		t.Fatalf("slotMoving(nil) allocates %v times, want 0", n)
	}
	if !slotMoving(serverErr("MOVED 1 127.0.0.1:7001")) || slotMoving(errors.New("MOVED but not a Redis error")) {
		t.Fatal("slotMoving must still tell a server's MOVED answer from other errors")
	}
}

func TestRetryMovingSendsTheCallAgainUntilTheSlotHasMoved(t *testing.T) {
	calls := 0
	v, err := retryMoving(context.Background(), func() (any, error) {
		calls++
		if calls < 3 {
			return nil, serverErr("TRYAGAIN Multiple keys request during rehashing of slot")
		}
		return "ok", nil
	})
	if v != "ok" || err != nil || calls != 3 {
		t.Fatalf("retryMoving = %v, %v after %d calls, want ok after 3", v, err, calls)
	}
}

func TestRetryMovingGivesUpWithTheSlotMovingAnswerBeforeTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	calls := 0
	_, err := retryMoving(ctx, func() (any, error) {
		calls++
		return nil, serverErr("ASK 3999 127.0.0.1:7001")
	})
	if !slotMoving(err) {
		t.Fatalf("retryMoving = %v, want the last slot-moving answer (not a timeout)", err)
	}
	if calls < 2 || calls > len(movingBackoff) {
		t.Fatalf("%d calls, want a few (stopping before the 100ms deadline)", calls)
	}
}

func TestRetryMovingDoesNotRepeatOtherErrors(t *testing.T) {
	calls := 0
	_, err := retryMoving(context.Background(), func() (any, error) {
		calls++
		return nil, serverErr("ERR user_script:1: boom")
	})
	if err == nil || calls != 1 {
		t.Fatalf("%d calls (%v), want one: a script error is not retried", calls, err)
	}
}
