// Package pools splits one resource's quota between business lines and
// decides, for every apply, which pools a grant draws from or why it is
// refused.
//
// A resource with lines has three pools per period: the shared pool
// (sharedPercent of the limit), the dedicated pool (dedicatedPercent, cut
// into one dedicated part per line by weight or by an explicit amount) and
// the buffer (bufferPercent, the reserve). A line draws from its dedicated
// part first, then from the shared pool up to borrowLimitPercent of its
// dedicated part, then from buffer lent to it (elasticity or an operator's
// release), then from temporary grants, those that expire first first. It
// never draws another line's dedicated part except what a reclaim moved to
// it. Tiers (CORE, GROWTH, EXPLORE) set reject watermarks: above its
// watermark a line's new applies are refused in proportion to how far past
// it the line is, deterministically from the session id (Bucket).
//
// The package holds three things:
//   - Plan: the layout (who owns how much) computed from a limit, the
//     shares and the lines;
//   - Model: the plain Go reference model of every per-apply decision (apply,
//     finish with refunds to the same pools, grants, buffer releases). The
//     Redis Lua scripts implement the same rules; a randomized test holds the
//     two against each other;
//   - Controller: the periodic decisions (watermark raise and decay,
//     predictive and reactive elasticity, reclaim), run on any clock, and
//     Simulate, which replays a workload through Model and Controller on a
//     simulated clock (qc-replay pools).
//
// It imports only the standard library; internal/quota, the adapters and
// the HTTP layer import it, never the other way round.
package pools
