package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/pools"
)

// TestATierChangeStartsAtTheNewTiersWatermark: a line moved to another
// tier starts at that tier's watermark, in Redis at once and in a rebuild
// after Redis loss. pool_layout.lua kept the watermark the controller had
// set under the old tier (HSETNX), so an EXPLORE line at 50 % made CORE
// stayed at 50 % (a CORE line starts at 95 %) and its non-critical work
// was refused by a watermark its tier does not have (found in review: 60
// % after EXPLORE → CORE, still there 25 s later with elasticity OFF); and
// the journal's last watermark event still said 50 %, so a rebuild would
// have brought it back.
func TestATierChangeStartsAtTheNewTiersWatermark(t *testing.T) {
	lossBackends(t, func(t *testing.T, w *lossWorld) {
		base := "/admin/policies/" + w.res
		w.a.putPolicy(t, w.res, `{"quotaType":"TOKENS","totalLimit":10000,"resetCron":"@daily"}`)
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"EXPLORE","weight":1}`})
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/b", body: `{"tier":"CORE","weight":1}`})
		watermark := func() string {
			t.Helper()
			return fmt.Sprint(lineOf(t, w.pools(t), "a")["watermarkPercent"])
		}
		// The controller had lowered a's watermark to 50 % (journalled as
		// it journals it); a rebuild brings that back.
		if err := w.sql.RecordPoolEvents(t.Context(), w.res, []pools.Event{{AtMs: time.Now().UnixMilli(), Kind: "WATERMARK_LOWERED",
			Line: "a", Amount: 5000, Reason: "test: the controller lowered it"}}); err != nil {
			t.Fatal(err)
		}
		w.lose(t)
		if got := watermark(); got != "50" {
			t.Fatalf("set-up: a's watermark %s%% after the rebuild, want 50", got)
		}
		w.a.mustOK(t, request{method: "PUT", path: base + "/lines/a", body: `{"tier":"CORE","weight":1}`})
		if got := watermark(); got != "95" {
			t.Fatalf("after EXPLORE → CORE: a's watermark %s%%, want CORE's 95", got)
		}
		w.lose(t)
		if got := watermark(); got != "95" {
			t.Fatalf("after Redis lost the pools: a's watermark %s%%, want CORE's 95 (the tier change journalled)", got)
		}
	})
}
