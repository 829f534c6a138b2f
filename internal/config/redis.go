package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Redis modes (QC_REDIS_MODE).
const (
	RedisStandalone = "standalone"
	RedisCluster    = "cluster"
	RedisSentinel   = "sentinel"
)

// Addrs splits Addr at commas, trimming spaces; empty parts are kept (as "")
// for validate to report.
func (r Redis) Addrs() []string {
	if r.Addr == "" {
		return nil
	}
	parts := strings.Split(r.Addr, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// validate checks the Redis topology settings: the mode, its addresses
// and, for Sentinel, the master name. Only when Redis is configured (an
// empty Addr is dev mode, checked elsewhere).
func (r Redis) validate() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if r.WaitReplicas < 0 || r.WaitReplicas > 16 {
		bad("redis-wait-replicas must be between 0 and 16, got %d", r.WaitReplicas)
	}
	if r.WaitTimeout <= 0 || r.WaitTimeout >= r.Timeout {
		bad("redis-wait-timeout must be above 0 and below redis-timeout (%s: the WAIT reply is read within it), got %s", r.Timeout, r.WaitTimeout)
	}
	if r.SessionRecord != SessionRecordPacked && r.SessionRecord != SessionRecordHash {
		bad("redis-session-record must be packed or hash, got %q", r.SessionRecord)
	}
	mode := r.Mode
	switch mode {
	case "", RedisStandalone, RedisCluster, RedisSentinel:
	default:
		bad("redis-mode must be standalone, cluster or sentinel, got %q", r.Mode)
		return errs
	}
	if r.MasterName != "" && mode != RedisSentinel {
		bad("redis-master is for sentinel mode only (redis-mode is %q)", mode)
	}
	addrs := r.Addrs()
	if len(addrs) == 0 {
		if mode == RedisCluster || mode == RedisSentinel || r.MasterName != "" {
			bad("redis-mode %s needs redis-addr (the %s)", mode, map[string]string{
				RedisCluster: "seed nodes, host:port,host:port", RedisSentinel: "Sentinels, host:port,host:port"}[mode])
		}
		return errs
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		switch {
		case a == "":
			bad("redis-addr: address %d of %d is empty (%q)", i+1, len(addrs), r.Addr)
		case err != nil || host == "" || perr != nil || n < 1 || n > 65535:
			bad("redis-addr: %q is not host:port", a)
		case seen[a]:
			bad("redis-addr: %q is listed twice", a)
		}
		seen[a] = true
	}
	switch mode {
	case "", RedisStandalone:
		if len(addrs) > 1 {
			bad("redis-addr lists %d addresses: set redis-mode to cluster (seed nodes) or sentinel (Sentinels), or give one host:port", len(addrs))
		}
	case RedisCluster:
		if r.DB != 0 {
			bad("redis-db must be 0 in cluster mode (Redis Cluster has database 0 only), got %d", r.DB)
		}
	case RedisSentinel:
		if r.MasterName == "" {
			bad("redis-mode sentinel needs redis-master, the master name the Sentinels monitor")
		}
	}
	return errs
}
