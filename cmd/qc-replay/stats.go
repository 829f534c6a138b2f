package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/quotacenter/quota-center/api/client"
)

// Stats are the counters of one replay (or of one worker, merged at the end).
// Amounts are tokens.
type Stats struct {
	Rows      int // rows replayed (dispatched to a worker)
	Requests  int // HTTP calls, retries included
	Applies   int // apply calls, retries included
	Finishes  int // finish calls, retries included
	Retries   int // calls that were retries
	Granted   int // applies granted
	Refused   int // applies refused with 429 QUOTA_EXHAUSTED
	Finished  int // finishes that succeeded
	Errors    map[string]int
	FirstErrs []string // the first few error messages, for diagnosis

	TokensGranted  int64
	TokensCharged  int64
	TokensRefunded int64
	TokensOverage  int64

	ApplyLatency  []time.Duration // one per apply call
	FinishLatency []time.Duration // one per finish call

	MaxLag time.Duration // worst delay of a row behind its scheduled time (--speedup > 0)
}

// maxFirstErrs bounds Stats.FirstErrs.
const maxFirstErrs = 5

// newStats returns empty Stats.
func newStats() *Stats { return &Stats{Errors: map[string]int{}} }

// addError counts one failed call (after its retries) under "op CODE".
func (s *Stats) addError(op string, err error) {
	s.Errors[op+" "+errorCode(err)]++
	if len(s.FirstErrs) < maxFirstErrs {
		s.FirstErrs = append(s.FirstErrs, op+": "+err.Error())
	}
}

// ErrorCount is the number of failed calls other than 429 refusals.
func (s *Stats) ErrorCount() int {
	n := 0
	for _, c := range s.Errors {
		n += c
	}
	return n
}

// Merge adds o into s.
func (s *Stats) Merge(o *Stats) {
	s.Rows += o.Rows
	s.Requests += o.Requests
	s.Applies += o.Applies
	s.Finishes += o.Finishes
	s.Retries += o.Retries
	s.Granted += o.Granted
	s.Refused += o.Refused
	s.Finished += o.Finished
	for k, v := range o.Errors {
		s.Errors[k] += v
	}
	for _, e := range o.FirstErrs {
		if len(s.FirstErrs) < maxFirstErrs {
			s.FirstErrs = append(s.FirstErrs, e)
		}
	}
	s.TokensGranted += o.TokensGranted
	s.TokensCharged += o.TokensCharged
	s.TokensRefunded += o.TokensRefunded
	s.TokensOverage += o.TokensOverage
	s.ApplyLatency = append(s.ApplyLatency, o.ApplyLatency...)
	s.FinishLatency = append(s.FinishLatency, o.FinishLatency...)
	s.MaxLag = max(s.MaxLag, o.MaxLag)
}

// errorCode names an error for the error counters: the server's code, or
// HTTP_<status> for a non-JSON error answer, or TRANSPORT.
func errorCode(err error) string {
	if e, ok := asClientError(err); ok {
		if e.Code != "" {
			return e.Code
		}
		return fmt.Sprintf("HTTP_%d", e.StatusCode)
	}
	return "TRANSPORT"
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It returns 0 for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// ms formats d in milliseconds with 3 decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}

// Check compares the resource's status before and after the run with what
// the run charged: usedAmount must have gone up by exactly charged, and
// reservedAmount must be back to where it was. It returns the failures
// (none when the check passes).
func Check(before, after *client.QuotaStatus, charged int64) []string {
	var fails []string
	if !before.PeriodStart.Equal(after.PeriodStart) {
		fails = append(fails, fmt.Sprintf("the period changed during the run (%s → %s): the policy reset, amounts are not comparable",
			before.PeriodStart.Format(time.RFC3339), after.PeriodStart.Format(time.RFC3339)))
	}
	if d := after.UsedAmount - before.UsedAmount; d != charged {
		fails = append(fails, fmt.Sprintf("usedAmount went up by %d (%d → %d) but this run charged %d (difference %+d)",
			d, before.UsedAmount, after.UsedAmount, charged, d-charged))
	}
	if after.ReservedAmount != before.ReservedAmount {
		fails = append(fails, fmt.Sprintf("reservedAmount is %d, was %d before the run (difference %+d)",
			after.ReservedAmount, before.ReservedAmount, after.ReservedAmount-before.ReservedAmount))
	}
	return fails
}

// PrintSummary writes the replay report. wall is the replay's wall time.
func PrintSummary(w io.Writer, s *Stats, wall time.Duration) {
	slices.Sort(s.ApplyLatency)
	slices.Sort(s.FinishLatency)
	fmt.Fprintf(w, "rows:             %d\n", s.Rows)
	fmt.Fprintf(w, "requests:         %d (apply %d, finish %d, retries %d)\n", s.Requests, s.Applies, s.Finishes, s.Retries)
	fmt.Fprintf(w, "granted:          %d\n", s.Granted)
	fmt.Fprintf(w, "refused (429):    %d\n", s.Refused)
	fmt.Fprintf(w, "errors:           %d\n", s.ErrorCount())
	keys := make([]string, 0, len(s.Errors))
	for k := range s.Errors {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-30s %d\n", k+":", s.Errors[k])
	}
	for _, e := range s.FirstErrs {
		fmt.Fprintf(w, "  e.g. %s\n", e)
	}
	fmt.Fprintf(w, "tokens granted:   %d\n", s.TokensGranted)
	fmt.Fprintf(w, "tokens charged:   %d\n", s.TokensCharged)
	fmt.Fprintf(w, "tokens refunded:  %d\n", s.TokensRefunded)
	fmt.Fprintf(w, "tokens overage:   %d\n", s.TokensOverage)
	fmt.Fprintf(w, "apply latency:    p50 %s ms, p99 %s ms (%d calls)\n",
		ms(Percentile(s.ApplyLatency, 50)), ms(Percentile(s.ApplyLatency, 99)), len(s.ApplyLatency))
	fmt.Fprintf(w, "finish latency:   p50 %s ms, p99 %s ms (%d calls)\n",
		ms(Percentile(s.FinishLatency, 50)), ms(Percentile(s.FinishLatency, 99)), len(s.FinishLatency))
	if s.MaxLag > 0 {
		fmt.Fprintf(w, "max dispatch lag: %s ms (rows started late; raise --concurrency if large)\n", ms(s.MaxLag))
	}
	rate := 0.0
	if wall > 0 {
		rate = float64(s.Requests) / wall.Seconds()
	}
	fmt.Fprintf(w, "wall time:        %.3f s\n", wall.Seconds())
	fmt.Fprintf(w, "throughput:       %.1f req/s\n", rate)
}

// printStatus writes one status line.
func printStatus(w io.Writer, label string, st *client.QuotaStatus) {
	next := "never"
	if st.NextResetAt != nil {
		next = st.NextResetAt.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%-17s used=%d reserved=%d remaining=%d limit=%d active=%d period=%s next-reset=%s\n",
		label+":", st.UsedAmount, st.ReservedAmount, st.RemainingQuota, st.TotalLimit, st.ActiveSessions,
		st.PeriodStart.Format(time.RFC3339), next)
}

// joinFails formats Check failures on one line.
func joinFails(f []string) string { return strings.Join(f, "; ") }
