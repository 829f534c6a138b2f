// Package app wires quota-center together: it opens the backends (or the
// embedded dev-mode ones), builds the service, HTTP API, metrics and
// sweeper, and runs them until its context ends. cmd/quota-center calls it;
// end-to-end tests call it on port 0.
package app
