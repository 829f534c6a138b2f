// Package dev starts the embedded backends of dev mode: an in-process
// miniredis (which runs the same Lua scripts as Redis) and a SQLite ledger.
// The service code on top of them is the production code, unchanged.
// Nothing is kept on exit unless a SQLite file path is given.
//
// It imports redisstore-compatible clients and mysqlstore; nothing imports it
// but cmd.
//
// A build with -tags nodev (the container image's, see the Dockerfile)
// leaves dev mode out, and with it miniredis and the SQLite driver: Start
// then fails with ErrNotBuilt and Available is false. Every other build
// (go run, go test, make run, make build) has it.
package dev

import "errors"

// ErrNotBuilt is Start's error in a build with -tags nodev.
var ErrNotBuilt = errors.New("dev mode is not in this binary (built with -tags nodev, as the container image is): " +
	"set QC_REDIS_ADDR and QC_MYSQL_DSN, or use a build without the nodev tag for dev mode (make run, go run ./cmd/quota-center serve)")
