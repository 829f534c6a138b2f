package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `quota-center ledger` names its one command; an unknown one is an error
// that does; `ledger prune` without QC_MYSQL_DSN refuses dev mode.
func TestLedgerCommand(t *testing.T) {
	t.Setenv("QC_MYSQL_DSN", "")
	t.Setenv("QC_REDIS_ADDR", "")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"ledger"}, &out, &out); err != nil || !strings.Contains(out.String(), "ledger prune [--dry-run]") {
		t.Errorf("ledger: %v, %q; want its usage", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"ledger", "purge"}, &out, &out); err == nil ||
		!strings.Contains(err.Error(), `unknown ledger command "purge"`) || !strings.Contains(err.Error(), "ledger prune") {
		t.Errorf("ledger purge: %v; want an error naming ledger prune", err)
	}
	err := run(context.Background(), []string{"ledger", "prune", "--dry-run"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "needs QC_MYSQL_DSN") || out.Len() != 0 {
		t.Errorf("ledger prune without a DSN: %v, printed %q; want a refusal of dev mode", err, out.String())
	}
}
