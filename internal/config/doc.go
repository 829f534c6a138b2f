// Package config holds quota-center's configuration: typed, nested structs
// with documented defaults, filled from command-line flags and QC_
// environment variables (flag --http-addr ⇔ QC_HTTP_ADDR) by
// peterbourgon/ff. Packages receive their own sub-config; none of them read
// the environment.
package config
