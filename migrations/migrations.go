// Package migrations holds the versioned SQL schema of quota-center, embedded
// in the binary: one directory per SQL dialect (mysql/ for MySQL and MariaDB,
// sqlite/ for SQLite), with the same numbered files (00001_init.sql, …) in
// each. Files use the goose format (-- +goose Up / -- +goose Down) and are
// applied by internal/mysqlstore with a github.com/pressly/goose/v3 Provider.
//
// Add a change as the next number in both directories; never edit a file that
// has been released.
package migrations

import "embed"

// MySQL holds the MySQL/MariaDB migrations under the directory "mysql"
// (use fs.Sub(MySQL, "mysql") to get them at the root).
//
//go:embed mysql/*.sql
var MySQL embed.FS

// SQLite holds the SQLite migrations under the directory "sqlite"
// (use fs.Sub(SQLite, "sqlite") to get them at the root).
//
//go:embed sqlite/*.sql
var SQLite embed.FS
