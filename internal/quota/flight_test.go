package quota

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func TestFlightSharesOneCallAmongConcurrentCallers(t *testing.T) {
	var f flight
	var calls atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	want := errors.New("shared")
	var wg sync.WaitGroup
	errs := make([]error, 10)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[0] = f.do("k", func() error { calls.Add(1); close(started); <-release; return want })
	}()
	<-started
	for i := 1; i < 10; i++ {
		wg.Add(1)
		late := fmt.Errorf("late call of caller %d", i) // a value of its own
		go func() { defer wg.Done(); errs[i] = f.do("k", func() error { calls.Add(1); return late }) }()
	}
	// Waiters that arrived while the first call ran share its answer; any
	// that came after it start (or share) a later call, whose answer is that
	// call's own error value. Either way the first call ran exactly once,
	// every caller got an answer of a call that ran, and fn ran once per
	// distinct answer.
	close(release)
	wg.Wait()
	if !errors.Is(errs[0], want) {
		t.Fatalf("first caller got %v", errs[0])
	}
	answers := map[error]bool{want: true}
	for i, err := range errs[1:] {
		if err == nil {
			t.Fatalf("caller %d got no answer", i+1)
		}
		answers[err] = true
	}
	if n := int(calls.Load()); n != len(answers) {
		t.Fatalf("fn ran %d times for %d distinct answers %v", n, len(answers), errs)
	}
}

func TestFlightReleasesWaitersWhenTheCallPanics(t *testing.T) {
	var f flight
	started := make(chan struct{})
	release := make(chan struct{})
	waiterErr := make(chan error, 1)
	go func() {
		defer func() { _ = recover() }()
		_ = f.do("k", func() error { close(started); <-release; panic("boom") })
	}()
	<-started
	go func() { waiterErr <- f.do("k", func() error { return nil }) }()
	// Wait until the waiter is parked on the running call, then let it panic.
	for {
		f.mu.Lock()
		n := len(f.calls)
		f.mu.Unlock()
		if n == 1 {
			break
		}
	}
	close(release)
	if err := <-waiterErr; err != nil && !errors.Is(err, errFlightPanicked) {
		t.Fatalf("waiter got %v, want errFlightPanicked or its own run", err)
	}
	if err := f.do("k", func() error { return nil }); err != nil {
		t.Fatalf("the key stayed blocked after the panic: %v", err)
	}
}
