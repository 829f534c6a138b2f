// Package period turns a policy's resetCron and timezone into accounting
// periods. It implements quota.Scheduler on top of robfig/cron/v3.
//
// Accepted resetCron forms: "" (never resets), 5-field cron
// ("0 0 * * *"), 6-field cron with seconds ("0 0 0 * * *"), and descriptors
// (@yearly, @monthly, @weekly, @daily, @hourly, @every 5h). Cron fire times
// are computed in the policy's IANA timezone, so "@daily" in Asia/Tokyo
// resets at 15:00 UTC and DST shifts are followed. "@every D" periods are
// anchored at the policy's creation time: [created + k·D, created + (k+1)·D).
//
// A policy's first period starts at its creation, not at the previous fire
// time: a new policy is never reset straight away, and usage before the
// policy existed does not count.
//
// It imports quota and robfig/cron only; the server's own TZ never leaks in
// (every time is converted to the policy's location or UTC).
package period
