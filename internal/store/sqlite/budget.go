package sqlite

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// GetBudget implements store.Tx.
func (x *tx) GetBudget(ctx context.Context, workspace, name string) (*api.Budget, error) {
	rows, err := x.query(ctx, `SELECT etag, doc FROM budgets WHERE workspace = ? AND name = ?`, workspace, name)
	if err != nil {
		return nil, fmt.Errorf("getting budget %s: %w", name, err)
	}
	bs, err := scanDocs(rows, "budgets", setBudgetEtag)
	if err != nil {
		return nil, err
	}
	if len(bs) == 0 {
		return nil, store.NotFound("budget", name)
	}
	return &bs[0], nil
}

// ListBudgets implements store.Tx.
func (x *tx) ListBudgets(ctx context.Context, workspace string) ([]api.Budget, error) {
	rows, err := x.query(ctx, `SELECT etag, doc FROM budgets WHERE workspace = ? ORDER BY name`, workspace)
	if err != nil {
		return nil, fmt.Errorf("listing budgets: %w", err)
	}
	return scanDocs(rows, "budgets", setBudgetEtag)
}

func setBudgetEtag(b *api.Budget, etag int64) { b.Etag = strconv.FormatInt(etag, 10) }

// PutBudget implements store.Tx.
func (x *tx) PutBudget(ctx context.Context, b *api.Budget, ifMatch string) error {
	if b.Name == "" || b.Workspace == "" {
		return fmt.Errorf("budget %q in workspace %q: name and workspace must be set", b.Name, b.Workspace)
	}
	c := *b
	c.Etag = ""
	etag, err := x.putDoc(ctx, "budgets", "budget", b.Workspace, b.Name, c, ifMatch)
	if err != nil {
		return err
	}
	b.Etag = etag
	return nil
}

// DeleteBudget implements store.Tx.
func (x *tx) DeleteBudget(ctx context.Context, workspace, name string) error {
	return x.deleteOne(ctx, "budget", name, `DELETE FROM budgets WHERE workspace = ? AND name = ?`, workspace, name)
}
