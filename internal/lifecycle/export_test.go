package lifecycle

import "time"

// SetClock replaces j's clock.
func SetClock(j *Job, now func() time.Time) { j.now = now }
