package storetest

import (
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// testBudgets: budgets round-trip with their alerts, per workspace, under
// the etag rules.
func testBudgets(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	b := &api.Budget{Name: "gpu", Workspace: "default", Scope: api.BudgetScope{Compute: "c"}, Amount: 5, Period: api.BudgetMonthly,
		Thresholds: []float64{50, 100}, Actions: api.BudgetActions{Webhook: "http://127.0.0.1:9/x", Pause: true},
		Alerts: []api.BudgetAlert{{Budget: "gpu", Threshold: 50, PeriodStart: when(0), Time: when(1), Spent: 2.5}}}
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		return tx.PutBudget(ctx, b, "")
	})
	first := b.Etag
	view(t, s, func(tx store.Tx) error {
		got, err := tx.GetBudget(ctx, "default", "gpu")
		if err != nil {
			return err
		}
		if got.Etag != first || got.Scope.Compute != "c" || len(got.Alerts) != 1 || !got.Alerts[0].PeriodStart.Equal(when(0)) || !got.Actions.Pause {
			t.Errorf("budget = %+v", got)
		}
		_, err = tx.GetBudget(ctx, "default", "none")
		wantErr(t, "missing budget", err, store.ErrNotFound)
		return nil
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.PutBudget(ctx, b, first+"0") })
	wantErr(t, "stale etag", err, store.ErrPrecondition)
	update(t, s, func(tx store.Tx) error { return tx.DeleteBudget(ctx, "default", "gpu") })
	view(t, s, func(tx store.Tx) error {
		bs, err := tx.ListBudgets(ctx, "default")
		if err != nil || len(bs) != 0 {
			t.Errorf("after delete: %+v, %v", bs, err)
		}
		return nil
	})
}

func testSettings(t *testing.T, open Opener) {
	s := openStore(t, open)
	ctx := t.Context()
	view(t, s, func(tx store.Tx) error {
		_, err := tx.GetSetting(ctx, "admin_token_created")
		wantErr(t, "get missing setting", err, store.ErrNotFound)
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.PutSetting(ctx, "admin_token_created", "yes"); err != nil {
			return err
		}
		if err := tx.PutSetting(ctx, "empty", ""); err != nil {
			return err
		}
		return tx.PutSetting(ctx, "admin_token_created", "twice")
	})
	view(t, s, func(tx store.Tx) error {
		for key, want := range map[string]string{"admin_token_created": "twice", "empty": ""} {
			v, err := tx.GetSetting(ctx, key)
			if err != nil || v != want {
				t.Errorf("GetSetting(%q) = %q, %v; want %q", key, v, err, want)
			}
		}
		return nil
	})
}
