package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP forwarder between quota-center and a backend that can hold
// back or lose what the backend sends: a command that ran but whose answer
// comes too late (Redis: go-redis sends it again, since it retries read
// timeouts, so every script must be idempotent), or a statement that ran but
// whose connection died before the answer (MySQL: the driver says "invalid
// connection", and the caller cannot know whether the row was written).
// Neither can be made with CLIENT PAUSE or KILL: a paused Redis runs
// nothing, and KILL rolls a running statement back.
//
// When the target does not answer, an accepted connection is closed at
// once; go-redis then reports a bare EOF, unlike "connection refused" from
// a direct dial. Env suspends the proxy (no listener) while it restarts
// Redis, so the service sees what it would see without a proxy.
type Proxy struct {
	addr   string
	target string

	mu         sync.Mutex
	ln         net.Listener // nil while suspended
	closed     bool
	delay      time.Duration
	delayUntil time.Time
	dropUntil  time.Time
	dropped    int
	conns      map[net.Conn]struct{}

	wg   sync.WaitGroup
	once sync.Once
}

// StartProxy listens on a free loopback port and forwards to target.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the proxy's host:port (the same across Suspend and Resume).
func (p *Proxy) Addr() string { return p.addr }

// Suspend stops listening and cuts every connection, so that clients see
// "connection refused" as they would with the target itself down. (A proxy
// that accepts and then closes makes go-redis report a bare EOF instead.)
func (p *Proxy) Suspend() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		reset(c)
	}
}

// Resume listens again on the same address.
func (p *Proxy) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("proxy closed")
	}
	if p.ln != nil {
		return nil
	}
	var ln net.Listener
	var err error
	for range 50 { // the port may linger for a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// DelayReplies holds every chunk the target sends during the next window
// for delay before passing it on (later chunks of the connection queue
// behind it, as on a slow link).
func (p *Proxy) DelayReplies(delay, window time.Duration) {
	p.mu.Lock()
	p.delay, p.delayUntil = delay, time.Now().Add(window)
	p.mu.Unlock()
}

// DropReplies, for the next window, throws away whatever the target sends
// and resets both sides of that connection: the statement or command ran,
// its answer is lost with the connection. It returns how many connections
// the previous window cut.
func (p *Proxy) DropReplies(window time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.dropped
	p.dropped = 0
	p.dropUntil = time.Now().Add(window)
	return n
}

// Dropped is how many connections DropReplies cut since it was last called.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// onReply says what to do with a chunk from the target: hold it for a
// delay, or drop it (and the connection).
func (p *Proxy) onReply() (delay time.Duration, drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Before(p.dropUntil) {
		p.dropped++
		return 0, true
	}
	if now.Before(p.delayUntil) {
		return p.delay, false
	}
	return 0, false
}

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
		return true
	}
	delete(p.conns, c)
	return true
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, not FIN
	}
	_ = c.Close()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(client, true) {
		reset(client)
		_ = server.Close()
		return
	}
	p.track(server, true)
	defer func() {
		p.track(client, false)
		p.track(server, false)
	}()
	// Ends are closed the way the other side closed: a FIN after the last
	// byte is passed on (an RST would make the kernel drop data the client
	// has not read yet, losing answers the real server did send).
	done := make(chan struct{}, 2)
	go func() { // client → target: as is
		if _, err := io.Copy(server, client); err != nil {
			reset(server)
		} else {
			_ = server.Close()
		}
		done <- struct{}{}
	}()
	go func() { // target → client: held back while a delay is on, lost while a drop is on
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				d, drop := p.onReply()
				if drop {
					reset(client)
					reset(server)
					break
				}
				if d > 0 {
					time.Sleep(d)
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					reset(server)
					break
				}
			}
			if errors.Is(err, io.EOF) {
				_ = client.Close()
				break
			}
			if err != nil {
				reset(client)
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// Close stops accepting, cuts every connection and waits for the
// forwarders to end.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		if p.ln != nil {
			err = p.ln.Close()
			p.ln = nil
		}
		conns := p.conns
		p.conns = map[net.Conn]struct{}{}
		p.mu.Unlock()
		for c := range conns {
			reset(c)
		}
		p.wg.Wait()
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
