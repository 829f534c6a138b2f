package config

import (
	"strings"
	"testing"
)

// serveArgs is a production configuration with the given Redis flags.
func serveArgs(redis ...string) []string {
	return append([]string{"--mysql-dsn", "u@tcp(h:3306)/db", "--insecure-open-quota"}, redis...)
}

func TestRedisModesParse(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		mode  string
		addrs int
	}{
		{serveArgs("--redis-addr", "10.0.0.1:6379"), RedisStandalone, 1},
		{serveArgs("--redis-addr", "10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000", "--redis-mode", "cluster"), RedisCluster, 3},
		{serveArgs("--redis-addr", "[::1]:7000", "--redis-mode", "cluster"), RedisCluster, 1},
		{serveArgs("--redis-addr", "s1:26379,s2:26379", "--redis-mode", "sentinel", "--redis-master", "qc"), RedisSentinel, 2},
	} {
		c, _, err := Load("serve", tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if c.Redis.Mode != tc.mode || len(c.Redis.Addrs()) != tc.addrs {
			t.Errorf("%v: mode %q, addrs %q", tc.args, c.Redis.Mode, c.Redis.Addrs())
		}
	}
	t.Setenv("QC_REDIS_ADDR", "a:1,b:2")
	t.Setenv("QC_REDIS_MODE", "sentinel")
	t.Setenv("QC_REDIS_MASTER", "mymaster")
	t.Setenv("QC_REDIS_SENTINEL_PASSWORD", "sentinel-secret")
	t.Setenv("QC_MYSQL_DSN", "u@tcp(h:3306)/db")
	t.Setenv("QC_INSECURE_OPEN_QUOTA", "true")
	c, _, err := Load("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Mode != RedisSentinel || c.Redis.MasterName != "mymaster" || strings.Join(c.Redis.Addrs(), " ") != "a:1 b:2" {
		t.Fatalf("from the environment: %+v", c.Redis)
	}
	if r := c.Redacted().Redis; r.SentinelPassword != "***" {
		t.Fatalf("redacted sentinel password %q", r.SentinelPassword)
	}
}

func TestBadRedisTopologiesAreRefusedClearly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{serveArgs("--redis-addr", "a:1", "--redis-mode", "replica"), `redis-mode must be standalone, cluster or sentinel, got "replica"`},
		{serveArgs("--redis-addr", "a:1,b:2"), "redis-addr lists 2 addresses: set redis-mode to cluster"},
		{serveArgs("--redis-addr", "a:1,,b:2", "--redis-mode", "cluster"), "address 2 of 3 is empty"},
		{serveArgs("--redis-addr", "a:1,b", "--redis-mode", "cluster"), `"b" is not host:port`},
		{serveArgs("--redis-addr", "a:1,:2", "--redis-mode", "cluster"), `":2" is not host:port`},
		{serveArgs("--redis-addr", "a:99999"), `"a:99999" is not host:port`},
		{serveArgs("--redis-addr", "a:1,a:1", "--redis-mode", "cluster"), `"a:1" is listed twice`},
		{serveArgs("--redis-addr", "a:1", "--redis-mode", "cluster", "--redis-db", "2"), "redis-db must be 0 in cluster mode"},
		{serveArgs("--redis-addr", "s:26379", "--redis-mode", "sentinel"), "redis-mode sentinel needs redis-master"},
		{serveArgs("--redis-addr", "a:1", "--redis-master", "m"), "redis-master is for sentinel mode only"},
		{serveArgs("--redis-addr", "a:1", "--redis-wait-replicas", "-1"), "redis-wait-replicas must be between 0 and 16"},
		{serveArgs("--redis-addr", "a:1", "--redis-wait-timeout", "0s"), "redis-wait-timeout must be above 0"},
		{serveArgs("--redis-addr", "a:1", "--redis-wait-timeout", "500ms"), "below redis-timeout (500ms"},
		{serveArgs("--redis-addr", "a:1", "--redis-session-record", "json"), `redis-session-record must be packed or hash, got "json"`},
		{[]string{"--redis-mode", "cluster"}, "redis-mode cluster needs redis-addr"},
	} {
		_, _, err := Load("serve", tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
