// Package dev starts the embedded backends of dev mode: an in-process
// miniredis (which runs the same Lua scripts as Redis) and a SQLite ledger.
// The service code on top of them is the production code, unchanged.
// Nothing is kept on exit unless a SQLite file path is given.
//
// It imports redisstore-compatible clients and mysqlstore; nothing imports it
// but cmd.
package dev
