package config

import (
	"strings"
	"testing"
	"time"
)

func TestThroughputSettingsDefaultsAndOverrides(t *testing.T) {
	c, _, err := Load("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.PipelineMaxCalls != 128 || c.Redis.PipelineInterval != 500*time.Microsecond || !c.Redis.BatchApplies || c.MySQL.GroupCommitRows != 100 || c.MySQL.GroupCommitWait != 0 {
		t.Fatalf("defaults: pipeline %d every %v (batched applies %v), group commit %d rows / %v", c.Redis.PipelineMaxCalls, c.Redis.PipelineInterval, c.Redis.BatchApplies, c.MySQL.GroupCommitRows, c.MySQL.GroupCommitWait)
	}
	t.Setenv("QC_REDIS_PIPELINE_MAX_CALLS", "0")
	t.Setenv("QC_REDIS_PIPELINE_INTERVAL", "0s")
	t.Setenv("QC_REDIS_BATCH_APPLIES", "false")
	c, _, err = Load("serve", []string{"--mysql-group-commit-rows", "1000", "--mysql-group-commit-wait", "3ms"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.PipelineMaxCalls != 0 || c.Redis.PipelineInterval != 0 || c.Redis.BatchApplies || c.MySQL.GroupCommitRows != 1000 || c.MySQL.GroupCommitWait != 3*time.Millisecond {
		t.Fatalf("overrides: pipeline %d every %v (batched applies %v), group commit %d rows / %v", c.Redis.PipelineMaxCalls, c.Redis.PipelineInterval, c.Redis.BatchApplies, c.MySQL.GroupCommitRows, c.MySQL.GroupCommitWait)
	}
	t.Setenv("QC_REDIS_BATCH_APPLIES", "sometimes")
	if _, _, err := Load("serve", nil); err == nil || !strings.Contains(err.Error(), "redis-batch-applies") {
		t.Fatalf("QC_REDIS_BATCH_APPLIES=sometimes: err = %v, want one naming redis-batch-applies", err)
	}
}

func TestThroughputSettingsOutOfRangeAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--redis-pipeline-max-calls", "-1"},
		{"--redis-pipeline-max-calls", "10001"},
		{"--redis-pipeline-interval", "-1us"},
		{"--redis-pipeline-interval", "101ms"},
		{"--mysql-group-commit-rows", "0"},
		{"--mysql-group-commit-rows", "1001"},
		{"--mysql-group-commit-wait", "-1ms"},
		{"--mysql-group-commit-wait", "2s"},
	} {
		_, _, err := Load("serve", args)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: err = %v, want one naming %s", args, err, args[0])
		}
	}
}

func TestStrayArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		// "true" ends flag parsing: the backends after it would be dropped
		// and serve would start in dev mode.
		{"--migrate-on-start", "true", "--redis-addr", "127.0.0.1:6379", "--mysql-dsn", "u@tcp(h:3306)/db"},
		{"foo", "--log-level", "bogus"},
	} {
		if _, _, err := Load("serve", args); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
			t.Errorf("%v: err = %v, want an unexpected-argument error", args, err)
		}
	}
	if _, _, err := Load("serve", []string{"--redis-db", "-1"}); err == nil || !strings.Contains(err.Error(), "redis-db") {
		t.Errorf("--redis-db -1: err = %v, want one naming redis-db", err)
	}
}
