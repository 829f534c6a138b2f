package httpserve

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// listener is the net.Listener EngineFast's fasthttp serves: it does two
// things net/http's server does itself and fasthttp does not.
//
// Accept retries a temporary error (EMFILE, ENFILE: the process is out of
// file descriptors during a burst of connections) after a pause, 5 ms
// doubling up to 1 s, as net/http does; fasthttp's Serve would return the
// error, and internal/app stops the process when Serve fails.
//
// Its connections close lingering once lingerOnClose marked them: when
// EngineFast refuses a request it did not read to the end (a body over
// MaxBodyBytes, a header section over HeaderLimit, a malformed request, a
// panic's 500) it answers and closes while the client may still be sending.
// Closing a socket with unread bytes makes the kernel send a reset, which
// may reach the client before it read the answer: the client then sees
// "connection reset by peer" (a transport error, which api/client counts as
// the center failing, and retries) instead of the 4xx. As net/http does,
// the answer is followed by a FIN, and what the client still sends is read
// and dropped for at most lingerTime (lingerBytes) before the close.
//
// Close closes the listener once (fastServer's stop and fasthttp's Shutdown
// both close it) and returns nil after.
type listener struct {
	net.Listener
	log  *zap.Logger
	once sync.Once
}

func (l *listener) Close() error {
	err := error(nil)
	l.once.Do(func() { err = l.Listener.Close() })
	return err
}

const (
	lingerTime  = 500 * time.Millisecond // net/http's rstAvoidanceDelay
	lingerBytes = 8 << 20
)

func (l *listener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return &lingerConn{Conn: c}, nil
		}
		if !retryableAccept(err) {
			return nil, err
		}
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		l.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", pause))
		time.Sleep(pause)
	}
}

// retryableAccept reports whether an Accept error is one of the moment
// (what net/http's Serve takes as temporary: the process or the system out
// of file descriptors or buffers, a connection aborted before it was
// accepted) rather than the listener's end.
func retryableAccept(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// lingerConn is a connection whose Close lingers once lingerOnClose was
// called.
type lingerConn struct {
	net.Conn
	linger atomic.Bool
}

// lingerOnClose makes c's Close linger (when c is a lingerConn).
func lingerOnClose(c net.Conn) {
	if lc, ok := c.(*lingerConn); ok {
		lc.linger.Store(true)
	}
}

func (c *lingerConn) Close() error {
	if c.linger.Swap(false) {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			if c.SetReadDeadline(time.Now().Add(lingerTime)) == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, lingerBytes))
			}
		}
	}
	return c.Conn.Close()
}
