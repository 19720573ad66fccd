package service

import (
	"context"
	"fmt"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// ParseBudget parses a budget from a request body.
func (s *Service) ParseBudget(body []byte) (*api.Budget, error) {
	b, err := spec.ParseBudget("request body", body, nil)
	if err != nil {
		return nil, validation(err)
	}
	return b, nil
}

// PutBudget creates or replaces a budget; a replaced budget keeps the
// alerts it already sent, so changing it does not alert again. A budget on
// a compute needs the compute to exist.
func (s *Service) PutBudget(ctx context.Context, ws, name string, b *api.Budget) (*api.Budget, bool, error) {
	if b.Name == "" {
		b.Name = name
	}
	if b.Name != name {
		return nil, false, errorf(400, api.CodeValidation, "name: the body names budget %q but the URL %q", b.Name, name)
	}
	var fails []api.FieldProblem
	spec.ValidateBudget(b, func(field, format string, args ...any) {
		fails = append(fails, api.FieldProblem{Field: field, Message: fmt.Sprintf(format, args...)})
	})
	if len(fails) > 0 {
		return nil, false, &Error{Status: 400, Code: api.CodeValidation, Msg: "budget " + name + ": " + fails[0].Field + ": " + fails[0].Message, Fields: fails}
	}
	created := false
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		if c := b.Scope.Compute; c != "" {
			if _, err := tx.GetCompute(ctx, ws, c); store.IsNotFound(err) {
				return errorf(400, api.CodeValidation, "scope.compute: no compute %q in workspace %s; run 'tide compute list'", c, ws)
			} else if err != nil {
				return err
			}
		}
		old, err := tx.GetBudget(ctx, ws, name)
		switch {
		case store.IsNotFound(err):
			created = true
			b.CreatedOn = s.now()
		case err != nil:
			return err
		default:
			b.CreatedOn, b.Alerts, b.PeriodStart, b.Spent, b.CheckedOn = old.CreatedOn, old.Alerts, old.PeriodStart, old.Spent, old.CheckedOn
		}
		b.Workspace = ws
		return tx.PutBudget(ctx, b, "")
	})
	if err != nil {
		return nil, false, s.mapStoreErr(err, "budget", name)
	}
	s.notify()
	return b, created, nil
}

// Budget returns one budget with what its scope spent at the last check.
func (s *Service) Budget(ctx context.Context, ws, name string) (*api.Budget, error) {
	var out *api.Budget
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		b, err := tx.GetBudget(ctx, ws, name)
		if store.IsNotFound(err) {
			return notFound("budget", name, "run 'tide budget list' to see the workspace's budgets")
		}
		out = b
		return err
	})
	return out, err
}

// Budgets lists a workspace's budgets.
func (s *Service) Budgets(ctx context.Context, ws string) ([]api.Budget, error) {
	out := []api.Budget{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		bs, err := tx.ListBudgets(ctx, ws)
		if bs != nil {
			out = bs
		}
		return err
	})
	return out, err
}

// DeleteBudget deletes a budget.
func (s *Service) DeleteBudget(ctx context.Context, ws, name string) error {
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		err := tx.DeleteBudget(ctx, ws, name)
		if store.IsNotFound(err) {
			return notFound("budget", name, "run 'tide budget list' to see the workspace's budgets")
		}
		return err
	})
	return s.mapStoreErr(err, "budget", name)
}
