package config

import (
	"flag"
	"fmt"
	"time"
)

// Scale bounds what an instance does per resource (issue 23 §1): the
// background loops and the per-resource metrics cover the active
// resources only (internal/activity).
type Scale struct {
	// ActiveWindow (QC_ACTIVE_WINDOW, 15m): a resource is active until
	// this long after its last apply, heartbeat, finish, charge or change,
	// or after the end of a lease it granted, whichever is later. Only the
	// active resources are swept, reconciled, watched for a failover,
	// sampled for burn rates, and have per-resource series.
	ActiveWindow time.Duration
	// ResourceHistograms (QC_METRICS_RESOURCE_HISTOGRAMS, false):
	// quota_session_used_<unit> per resource (36 series a used resource);
	// off, one histogram a unit without the resource label.
	ResourceHistograms bool
}

// scaleFlags registers the Scale settings' flags.
func scaleFlags(fs *flag.FlagSet, s *Scale) {
	fs.DurationVar(&s.ActiveWindow, "active-window", s.ActiveWindow, "how long a resource counts as active after its last use or change (or its last lease's end): only active resources are swept, reconciled, watched for failovers, sampled and have per-resource series")
	fs.BoolVar(&s.ResourceHistograms, "metrics-resource-histograms", s.ResourceHistograms, "export quota_session_used_<unit> per resource (36 series a used resource and unit); off: one histogram a unit")
}

// validate checks the Scale settings.
func (s Scale) validate() []error {
	if s.ActiveWindow < time.Minute {
		return []error{fmt.Errorf("active-window must be at least 1m (a resource must outlive a sweep and a reconciliation pass), got %s", s.ActiveWindow)}
	}
	return nil
}
