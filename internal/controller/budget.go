package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// PeriodStart returns when b's current period began at now, and false when
// a custom period is not running (before its start or after its end).
func PeriodStart(b *api.Budget, now time.Time) (time.Time, bool) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch b.Period {
	case api.BudgetDaily:
		return day, true
	case api.BudgetWeekly:
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7)), true
	case api.BudgetCustom:
		return b.Start, !now.Before(b.Start) && now.Before(b.End)
	}
	return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC), true
}

// DueThresholds returns b's thresholds that spent has reached in the
// period that began at start and that have not alerted yet in it.
func DueThresholds(b *api.Budget, start time.Time, spent float64) []float64 {
	var due []float64
	for _, t := range b.Thresholds {
		if spent < b.Amount*t/100 {
			continue
		}
		sent := slices.ContainsFunc(b.Alerts, func(a api.BudgetAlert) bool {
			return a.Threshold == t && a.PeriodStart.Equal(start)
		})
		if !sent {
			due = append(due, t)
		}
	}
	return due
}

// budgetLoop checks the budgets every BudgetInterval until ctx ends.
func (c *Controller) budgetLoop(ctx context.Context) {
	every := c.cfg.BudgetInterval
	if every <= 0 {
		every = time.Minute // a controller built without the server's defaults
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.checkBudgets(ctx, c.now().UTC()); err != nil && ctx.Err() == nil {
				c.log.Warn("checking budgets", "err", err)
			}
		}
	}
}

// checkBudgets measures what each budget's scope spent this period and
// alerts the thresholds reached: an event, the webhook (sent in the
// background, never holding the controller), and with pause at 100 % the
// scoped clusters' max set to 0 and instances stopped. An alert is
// recorded in the budget in the same transaction, so it fires once per
// threshold and period, restarts included.
func (c *Controller) checkBudgets(ctx context.Context, now time.Time) error {
	var budgets []api.Budget
	err := c.store.View(ctx, func(tx store.Tx) error {
		wss, err := tx.ListWorkspaces(ctx)
		if err != nil {
			return err
		}
		for _, ws := range wss {
			bs, err := tx.ListBudgets(ctx, ws.Name)
			if err != nil {
				return err
			}
			budgets = append(budgets, bs...)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range budgets {
		if err := c.checkBudget(ctx, budgets[i].Workspace, budgets[i].Name, now); err != nil {
			c.log.Warn("checking budget", "budget", budgets[i].Name, "err", err)
		}
	}
	return nil
}

func (c *Controller) checkBudget(ctx context.Context, ws, name string, now time.Time) error {
	var alerts []api.BudgetAlert
	var webhook string
	err := c.store.Update(ctx, func(tx store.Tx) error {
		alerts, webhook = nil, ""
		b, err := tx.GetBudget(ctx, ws, name)
		if err != nil {
			return err
		}
		start, running := PeriodStart(b, now)
		if !running {
			return nil
		}
		spent, err := service.Spent(ctx, tx, c.catalog, b, start, now)
		if err != nil {
			return err
		}
		b.PeriodStart, b.Spent, b.CheckedOn = start, spent, now
		for _, t := range DueThresholds(b, start, spent) {
			a := api.BudgetAlert{Budget: b.Name, Workspace: ws, PeriodStart: start, Threshold: t, Spent: spent,
				Amount: b.Amount, Currency: api.Currency, Time: now}
			if b.Actions.Pause && t >= 100 {
				if a.Paused, err = c.pauseScope(ctx, tx, b, now); err != nil {
					return err
				}
			}
			msg := fmt.Sprintf("budget %s: $%.2f spent since %s, %g%% of $%.2f", b.Name, spent, start.Format(time.DateOnly), t, b.Amount)
			if len(a.Paused) > 0 {
				msg += "; paused " + strings.Join(a.Paused, ", ")
			}
			if err := tx.AddEvent(ctx, ws, "budget/"+b.Name, &api.Event{Time: now, Kind: "BudgetThreshold", Message: msg}); err != nil {
				return err
			}
			b.Alerts = append(b.Alerts, a)
			alerts = append(alerts, a)
		}
		// Keep the alerts of this period and the one before.
		b.Alerts = slices.DeleteFunc(b.Alerts, func(a api.BudgetAlert) bool { return a.PeriodStart.Before(start.AddDate(0, -1, 0)) })
		webhook = b.Actions.Webhook
		return tx.PutBudget(ctx, b, "")
	})
	if err != nil {
		return err
	}
	if webhook != "" {
		for _, a := range alerts {
			go c.sendWebhook(context.WithoutCancel(ctx), webhook, a)
		}
	}
	return nil
}

// pauseScope sets the scoped clusters' max_instances (and min) to 0 and
// asks the scoped instances to stop; it returns what it paused.
func (c *Controller) pauseScope(ctx context.Context, tx store.Tx, b *api.Budget, now time.Time) ([]string, error) {
	cs, err := tx.ListComputes(ctx, b.Workspace)
	if err != nil {
		return nil, err
	}
	var paused []string
	for i := range cs {
		cp := &cs[i]
		switch {
		case b.Scope.Compute != "" && cp.Name != b.Scope.Compute:
			continue
		case b.Scope.Tag != "":
			k, v, _ := strings.Cut(b.Scope.Tag, "=")
			if cp.Tags[k] != v {
				continue
			}
		}
		if cp.IsInstance() {
			if cp.Instance.Desired == api.InstanceStopped {
				continue
			}
			cp.Instance.Desired = api.InstanceStopped
			cp.Instance.LastOperation = &api.LastOperation{OperationName: api.OperationStop, OperationTime: now, OperationStatus: api.OperationInProgress, OperationTrigger: "Budget"}
		} else {
			if cp.MaxInstances == 0 {
				continue
			}
			cp.MinInstances, cp.MaxInstances = 0, 0
		}
		cp.ModifiedOn = now
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return nil, err
		}
		msg := fmt.Sprintf("paused by budget %s (max_instances set to 0; raise it with tide compute update %s --max-instances N)", b.Name, cp.Name)
		if cp.IsInstance() {
			msg = fmt.Sprintf("stopped by budget %s (start it with tide compute start %s)", b.Name, cp.Name)
		}
		if err := tx.AddEvent(ctx, b.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: "BudgetPaused", Message: msg}); err != nil {
			return nil, err
		}
		paused = append(paused, cp.Name)
	}
	return paused, nil
}

// webhookTries is how often an alert's webhook is tried, with doubling
// waits from one second.
const webhookTries = 4

// sendWebhook POSTs the alert as JSON, retrying with back-off, and records
// how it went in the budget.
func (c *Controller) sendWebhook(ctx context.Context, url string, a api.BudgetAlert) {
	body, _ := json.Marshal(a)
	result := ""
	wait := time.Second
	for try := 1; try <= webhookTries; try++ {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("User-Agent", "tide-budget")
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				result = resp.Status
				if resp.StatusCode < 300 {
					cancel()
					break
				}
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		cancel()
		result = fmt.Sprintf("failed after %d tries: %v", try, err)
		if try < webhookTries {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait *= 2
		}
	}
	c.log.Info("budget webhook", "budget", a.Budget, "threshold", a.Threshold, "result", result)
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		b, err := tx.GetBudget(ctx, a.Workspace, a.Budget)
		if err != nil {
			return err
		}
		for i := range b.Alerts {
			if b.Alerts[i].Threshold == a.Threshold && b.Alerts[i].PeriodStart.Equal(a.PeriodStart) {
				b.Alerts[i].Webhook = result
			}
		}
		return tx.PutBudget(ctx, b, "")
	})
}
