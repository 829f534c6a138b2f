package client

import (
	"encoding/json"
	"strings"
	"testing"
)

// A PolicySpec without Pools sends no "pools" (the server leaves the pool
// settings as they are); with them, every setting is sent, zeros included.
func TestPolicySpecSendsPoolsOnlyWhenSet(t *testing.T) {
	b, err := json.Marshal(PolicySpec{ResourceName: "r", QuotaType: "TOKENS", TotalLimit: 1})
	if err != nil || strings.Contains(string(b), "pools") {
		t.Fatalf("%s %v", b, err)
	}
	s := DefaultPoolSettings()
	s.SharedPercent, s.DedicatedPercent, s.BorrowLimitPercent = 0, 90, 0
	b, err = json.Marshal(PolicySpec{ResourceName: "r", QuotaType: "TOKENS", TotalLimit: 1, Pools: &s})
	if err != nil || !strings.Contains(string(b), `"sharedPercent":0`) || !strings.Contains(string(b), `"borrowLimitPercent":0`) {
		t.Fatalf("%s %v", b, err)
	}
}
