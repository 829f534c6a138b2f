// Package console is the operators' web console at /admin/ui, served by the
// quota-center binary with its assets embedded: sign-in with an admin token
// (an HttpOnly cookie session kept in Redis, so every instance knows it),
// CSRF protection on every change, and pages for the resources (remaining
// vs limit, burn rate, forecast), a resource's live session map, its usage
// history (a chart by hour, a table by client), its pools (layout, lines
// with tier and watermark, grants, reclaims, pool events; issue 21 §3) and
// the audit log, with the actions change the limit, reset a period,
// force-finish a session, grant temporary quota, release reserve, void a
// grant and confirm or cancel a reclaim, each confirmed and given a reason
// (and audited under the signed-in name).
//
// Pages are rendered on the server with html/template (which escapes
// everything shown); htmx refreshes the live parts and uPlot draws the
// chart, both vendored from npm (static/README.md has their versions and
// licences). It calls the operators' domain (internal/admin) and the audit
// log through the small interfaces it declares; it must not import the
// stores or httpapi.
package console
