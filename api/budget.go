package api

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Budget periods.
const (
	BudgetMonthly = "monthly"
	BudgetWeekly  = "weekly"
	BudgetDaily   = "daily"
	BudgetCustom  = "custom"
)

// Budget is a spending limit on a workspace, a compute or a tag, with
// thresholds (percent of the amount) that alert once per period: an event
// always, a webhook POST when set, and with pause, the scoped clusters'
// max_instances set to 0 and instances stopped once 100 % is reached.
type Budget struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Scope       BudgetScope `json:"scope"`
	// Amount is the limit per period, in Currency.
	Amount float64 `json:"amount"`
	// Period is monthly (calendar months, UTC), weekly (from Monday),
	// daily or custom (Start to End).
	Period     string        `json:"period"`
	Start      time.Time     `json:"start,omitzero"`
	End        time.Time     `json:"end,omitzero"`
	Thresholds []float64     `json:"thresholds"`
	Actions    BudgetActions `json:"actions"`

	// Status, set by the server.
	Workspace   string        `json:"workspace,omitempty"`
	CreatedOn   time.Time     `json:"created_on,omitzero"`
	PeriodStart time.Time     `json:"period_start,omitzero"`
	Spent       float64       `json:"spent"`
	CheckedOn   time.Time     `json:"checked_on,omitzero"`
	Alerts      []BudgetAlert `json:"alerts,omitempty"`
	Etag        string        `json:"etag,omitempty"`
}

// BudgetScope says what a budget counts: one compute's nodes, the jobs
// tagged Tag ("key=value"), or (both empty) every node of the workspace.
type BudgetScope struct {
	Compute string `json:"compute,omitempty"`
	Tag     string `json:"tag,omitempty"`
}

// BudgetActions are what a budget does when a threshold is crossed, beyond
// recording an event.
type BudgetActions struct {
	// Webhook receives a JSON POST (BudgetAlert with the budget's name).
	Webhook string `json:"webhook,omitempty"`
	// Pause sets the scoped clusters' max_instances to 0 and stops the
	// scoped instances when spending reaches 100 %.
	Pause bool `json:"pause,omitempty"`
}

// BudgetAlert is a threshold crossed in one period: fired once, kept so a
// restart does not fire it again.
type BudgetAlert struct {
	Budget      string    `json:"budget"`
	Workspace   string    `json:"workspace"`
	PeriodStart time.Time `json:"period_start"`
	Threshold   float64   `json:"threshold"`
	Spent       float64   `json:"spent"`
	Amount      float64   `json:"amount"`
	Currency    string    `json:"currency"`
	Time        time.Time `json:"time"`
	Paused      []string  `json:"paused,omitempty"`
	// Webhook is how the webhook answered: "200 OK", or the error after
	// the retries; empty while it is being sent or when there is none.
	Webhook string `json:"webhook,omitempty"`
}

// Budgets lists a workspace's budgets.
func (c *Client) Budgets(ctx context.Context, ws string) ([]Budget, error) {
	return list[Budget](ctx, c, v1("workspaces", ws, "budgets"), nil)
}

// Budget returns one budget.
func (c *Client) Budget(ctx context.Context, ws, name string) (*Budget, error) {
	var out Budget
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "budgets", name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutBudget creates or replaces a budget.
func (c *Client) PutBudget(ctx context.Context, ws string, b *Budget) (*Budget, error) {
	if b.Name == "" {
		return nil, errors.New("name: required")
	}
	out := new(Budget)
	if _, err := c.do(ctx, http.MethodPut, v1("workspaces", ws, "budgets", b.Name), nil, b, out); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteBudget deletes a budget.
func (c *Client) DeleteBudget(ctx context.Context, ws, name string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "budgets", name), nil, nil, nil)
	return err
}
