package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quotacenter/quota-center/internal/quota"
)

// The answers that encode themselves give exactly encoding/json's bytes,
// for random values of every field: strings with HTML characters, quotes,
// control characters, U+2028, other non-ASCII and invalid UTF-8 among plain
// ones, extreme integers, each optional field present and absent.
func TestAppendersMatchEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	strs := []string{"", "SUCCESS", "a9a08346258f1809157896e1448afe97", "2026-12-02T01:57:48.072Z",
		"mx5f2ham.mx5f2ham", "<script>", "a&b", `q"uote`, `back\slash`, "tab\there", "nl\n", "\x00\x1f",
		"\u2028\u2029", "héllo", "日本", "\xff\xfe", "bad\xc3", "~!@#$%^*()_+-={}[]|:;',.?/ "}
	str := func() string {
		if rng.IntN(4) == 0 {
			return strs[rng.IntN(len(strs))] + strs[rng.IntN(len(strs))]
		}
		return strs[rng.IntN(len(strs))]
	}
	ints := []int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64, 1<<53 - 1, -(1<<53 - 1)}
	num := func() int64 {
		if rng.IntN(2) == 0 {
			return ints[rng.IntN(len(ints))]
		}
		return rng.Int64() - rng.Int64()
	}
	for i := range 5000 {
		var line *int64
		if rng.IntN(2) == 0 {
			v := num()
			line = &v
		}
		var drawn *quota.PoolSplit
		if rng.IntN(2) == 0 {
			drawn = &quota.PoolSplit{Base: num(), Dedicated: num(), Shared: num(), Buffer: num(), Grant: num(), Grants: str()}
		}
		answers := []jsonAppender{
			applyResponse{
				Success: rng.IntN(2) == 0, Code: str(), SessionID: str(), GrantedAmount: num(), RemainingQuota: num(),
				LineRemaining: line, LeaseExpiresAt: str(), HeartbeatIntervalSeconds: num(), FailOpen: rng.IntN(2) == 0,
				Drawn: drawn, QuotaTight: rng.IntN(2) == 0, PolicyVersion: str(),
			},
			heartbeatResponse{Success: rng.IntN(2) == 0, Code: str(), SessionID: str(), Status: str(),
				LeaseExpiresAt: str(), PolicyVersion: str()},
			finishResponse{Success: rng.IntN(2) == 0, Code: str(), SessionID: str(), GrantedAmount: num(),
				ChargedAmount: num(), RefundedAmount: num(), OverageAmount: num(), RemainingQuota: num()},
		}
		for _, a := range answers {
			want, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.appendJSON([]byte("x")); !bytes.Equal(got[1:], want) || got[0] != 'x' {
				t.Fatalf("case %d %T:\n got %s\nwant %s", i, a, got[1:], want)
			}
		}
	}
}
