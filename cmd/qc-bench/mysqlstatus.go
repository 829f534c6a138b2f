package main

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/go-sql-driver/mysql" // the server's MySQL, for SHOW GLOBAL STATUS
)

// statusReader reads MySQL's global Questions counter (statements the
// server ran, every client's); a nil one answers 0.
type statusReader struct{ db *sql.DB }

func openStatusReader(dsn string) (statusReader, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return statusReader{}, err
	}
	db.SetMaxOpenConns(1)
	return statusReader{db}, nil
}

func (s statusReader) Close() {
	if s.db != nil {
		_ = s.db.Close()
	}
}

// questions is SHOW GLOBAL STATUS LIKE 'Questions' (0 without a DSN).
func (s statusReader) questions(ctx context.Context) (int64, error) {
	if s.db == nil {
		return 0, nil
	}
	var name string
	var n int64
	if err := s.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		return 0, fmt.Errorf("mysql status: %w", err)
	}
	return n, nil
}
