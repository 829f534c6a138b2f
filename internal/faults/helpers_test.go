package faults_test

import (
	"database/sql"
	"os"

	_ "github.com/go-sql-driver/mysql"
)

func openDB(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }

// tailFile returns the last n bytes of a file ("" if unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
