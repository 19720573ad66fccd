package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/internal/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestStart checks that each Start gives an empty database of its own.
func TestStart(t *testing.T) {
	urls := map[string]bool{}
	for range 2 {
		u := pgtest.Start(t)
		if urls[u] {
			t.Fatalf("Start returned %s twice", u)
		}
		urls[u] = true
		conn, err := pgx.Connect(t.Context(), u)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		var n int
		err = conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n)
		conn.Close(context.Background())
		if err != nil || n != 0 {
			t.Fatalf("tables in a new database = %d, %v; want 0", n, err)
		}
	}
}
