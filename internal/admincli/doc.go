// Package admincli is `quota-center admin …`: the operators' command line on
// the HTTP API, through the Go client (api/client). Commands: policies
// (list, get, set, patch, delete), status, sessions, usage, reset, finish,
// grant, release and audit, and the pools' lines, pools, grants, reclaims,
// events and reconcile (issue 21 §3); aligned tables for people, `-o json`
// for scripts; the server and admin token from --url / --token or QC_URL /
// QC_ADMIN_TOKEN. It is built on peterbourgon/ff/v3's ffcli.
//
// It talks to a server only through api/client: it must not import the
// server's packages (internal/quota, httpapi, admin, stores).
package admincli
