package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStartTimeout bounds how long a private Redis may take to answer PING.
const RedisStartTimeout = 20 * time.Second

// Redis is a private redis-server on a free loopback port, persisting
// nothing (--save "" --appendonly no): a restart brings it back empty.
type Redis struct {
	server
	bin  string
	dir  string
	port int
	logf Logf
}

// StartRedis starts a private Redis with its files in dir (created if
// needed; the caller removes it). Errors wrap ErrMissingBinary when
// redis-server is not installed.
func StartRedis(ctx context.Context, dir string, logf Logf) (*Redis, error) {
	bin, err := lookBinary("redis-server")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir, port: port, logf: logf}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Addr is host:port of the server (the same across restarts).
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// LogPath is the server's log file.
func (r *Redis) LogPath() string { return filepath.Join(r.dir, "redis.log") }

// Client returns a new go-redis client with short timeouts; close it.
func (r *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: r.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRetries: -1, PoolSize: 4,
	})
}

// Start starts the server (again) on its port and waits until it answers
// PING. It is an error to start a running server.
func (r *Redis) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.proc != nil && !r.proc.exited() {
		r.mu.Unlock()
		return errors.New("redis: already running")
	}
	args := []string{
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no",
		"--logfile", "", "--loglevel", "warning",
	}
	p, err := startProcess(r.bin, args, r.LogPath())
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.proc = p
	r.mu.Unlock()
	c := r.Client()
	defer c.Close()
	err = waitUntil(ctx, RedisStartTimeout, "redis "+r.Addr(), p.exitErr, func(ctx context.Context) error {
		return c.Ping(ctx).Err()
	})
	if err != nil {
		_ = p.stop(syscall.SIGKILL, 5*time.Second)
		return fmt.Errorf("%w; log: %s", err, tail(r.LogPath(), 800))
	}
	r.logf.printf("faults: redis up on %s (pid %d)", r.Addr(), p.cmd.Process.Pid)
	return nil
}

// Stop shuts the server down (SIGTERM; nothing is saved) and waits for it.
func (r *Redis) Stop() error {
	p := r.current()
	if p == nil {
		return nil
	}
	err := p.stop(syscall.SIGTERM, 10*time.Second)
	r.logf.printf("faults: redis %s stopped", r.Addr())
	return err
}

// Kill kills the server with SIGKILL and waits for it to be gone.
func (r *Redis) Kill() error {
	p := r.current()
	if p == nil {
		return nil
	}
	err := p.stop(syscall.SIGKILL, 10*time.Second)
	r.logf.printf("faults: redis %s killed", r.Addr())
	return err
}

// Restart kills the server, waits down, and starts it again: EMPTY, since
// it persists nothing.
func (r *Redis) Restart(ctx context.Context, down time.Duration) error {
	if err := r.Kill(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return r.Start(ctx)
}

// do runs one command on a fresh connection.
func (r *Redis) do(ctx context.Context, args ...any) error {
	c := r.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Err()
}

// Pause runs CLIENT PAUSE d ALL: every client's commands wait for d (the
// server keeps accepting connections). It returns at once.
func (r *Redis) Pause(ctx context.Context, d time.Duration) error {
	return r.do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL")
}

// ScriptFlush empties the script cache: the next EVALSHA gets NOSCRIPT.
func (r *Redis) ScriptFlush(ctx context.Context) error { return r.do(ctx, "SCRIPT", "FLUSH") }

// FlushAll deletes every key (the script cache stays).
func (r *Redis) FlushAll(ctx context.Context) error { return r.do(ctx, "FLUSHALL") }

// Close kills the server. The directory is the caller's.
func (r *Redis) Close() error {
	p := r.current()
	if p == nil {
		return nil
	}
	return p.stop(syscall.SIGKILL, 10*time.Second)
}
