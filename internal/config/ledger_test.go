package config

import (
	"strings"
	"testing"
	"time"
)

func TestLedgerLifecycleDefaultsAndOverrides(t *testing.T) {
	c, _, err := Load("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Ledger{Interval: time.Hour, RollupAfter: 25 * time.Hour, Retention: 90 * 24 * time.Hour,
		Batch: 10000, DeleteBatch: 10000, Pause: 100 * time.Millisecond}
	if c.Ledger != want {
		t.Fatalf("defaults %+v; want %+v", c.Ledger, want)
	}
	t.Setenv("QC_LEDGER_RETENTION", "0")
	t.Setenv("QC_LEDGER_DRY_RUN", "true")
	c, _, err = Load("serve", []string{"--ledger-delete-batch", "500", "--ledger-rollup-after", "240h"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Ledger.Retention != 0 || !c.Ledger.DryRun || c.Ledger.DeleteBatch != 500 || c.Ledger.RollupAfter != 240*time.Hour {
		t.Fatalf("overrides: %+v", c.Ledger)
	}
}

func TestLedgerLifecycleSettingsOutOfRangeAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--ledger-rollup-after", "23h"},                                  // under the default finished-retention (24h)
		{"--ledger-rollup-after", "192h", "--finished-retention", "200h"}, // under finished-retention
		{"--ledger-retention", "-1h"},
		{"--ledger-delete-batch", "0"},
		{"--ledger-rollup-batch", "2000000"},
		{"--ledger-interval", "0s"},
	} {
		_, _, err := Load("serve", args)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: err = %v, want one naming %s", args, err, args[0])
		}
	}
}
