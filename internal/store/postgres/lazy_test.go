package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
)

// TestFirstStatementErrorSaidOnce: a transaction's first statement, sent
// with its BEGIN (lazy.go), that fails returns its error once, by Exec and
// by Query: pgx's batch Close returns the same error again.
func TestFirstStatementErrorSaidOnce(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Start(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, first := range map[string]func(x *tx) error{
		"Exec": func(x *tx) error { _, err := x.tx.Exec(ctx, `SELECT 1/0`); return err },
		"Query": func(x *tx) error {
			rows, err := x.tx.Query(ctx, `SELECT 1/0`)
			if err == nil {
				rows.Next()
				rows.Close()
				err = rows.Err()
			}
			return err
		},
	} {
		err := s.Update(ctx, func(x store.Tx) error { return first(x.(*tx)) })
		if err == nil || strings.Count(err.Error(), "SQLSTATE") != 1 {
			t.Errorf("%s: the error is %q, want it once", name, err)
		}
	}
}
