package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// TestBudgetWebhookAndPause: a 1-cent budget on a compute fires its
// thresholds once each as the compute's nodes cost money: events, a JSON
// POST to the webhook (which fails once and is retried), and at 100 % the
// compute's max_instances set to 0. Checks keep running and fire nothing
// again.
func TestBudgetWebhookAndPause(t *testing.T) {
	var mu sync.Mutex
	var got []api.BudgetAlert
	calls := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		var a api.BudgetAlert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		got = append(got, a)
	}))
	defer hook.Close()
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) { c.BudgetInterval = 300 * time.Millisecond })
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()
	createCompute(t, in, "name: spendy\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 2\n")
	b, err := in.client.PutBudget(ctx, "default", &api.Budget{Name: "tiny", Scope: api.BudgetScope{Compute: "spendy"},
		Amount: 0.0001, Period: api.BudgetMonthly, Thresholds: []float64{50, 100}, Actions: api.BudgetActions{Webhook: hook.URL, Pause: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Thresholds) != 2 {
		t.Fatalf("budget = %+v", b)
	}
	waitFor(t, "the compute to be paused by the budget", 60*time.Second, func() bool {
		c, err := in.client.Compute(ctx, "default", "spendy")
		return err == nil && c.MaxInstances == 0 && c.MinInstances == 0
	})
	waitFor(t, "both webhooks delivered", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	// Several more checks fire nothing new.
	first, err := in.client.Budget(ctx, "default", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three more budget checks", 30*time.Second, func() bool {
		b, err := in.client.Budget(ctx, "default", "tiny")
		return err == nil && b.CheckedOn.Sub(first.CheckedOn) >= 900*time.Millisecond
	})
	mu.Lock()
	if len(got) != 2 || got[0].Budget != "tiny" || got[0].Currency != "USD" || got[0].Spent < got[0].Amount*got[0].Threshold/100 {
		t.Errorf("webhook calls = %+v (%d calls)", got, calls)
	}
	mu.Unlock()
	b, err = in.client.Budget(ctx, "default", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Alerts) != 2 || b.Alerts[1].Threshold != 100 || len(b.Alerts[1].Paused) != 1 || b.Alerts[1].Paused[0] != "spendy" {
		t.Fatalf("alerts = %+v", b.Alerts)
	}
	for _, a := range b.Alerts {
		if a.Webhook != "200 OK" {
			t.Errorf("alert %g%%: webhook %q, want 200 OK (after a retry)", a.Threshold, a.Webhook)
		}
	}
	evs, err := in.client.ComputeEvents(ctx, "default", "spendy")
	if err != nil {
		t.Fatal(err)
	}
	paused := false
	for _, e := range evs {
		paused = paused || e.Kind == "BudgetPaused"
	}
	if !paused {
		t.Errorf("no BudgetPaused event on the compute: %+v", evs)
	}
	// Bad budgets are refused with the field.
	for _, bad := range []api.Budget{
		{Name: "neg", Amount: -5, Period: "monthly"},
		{Name: "nowhere", Amount: 5, Period: "monthly", Scope: api.BudgetScope{Compute: "missing"}},
		{Name: "hook", Amount: 5, Period: "monthly", Actions: api.BudgetActions{Webhook: "ftp://x"}},
	} {
		if _, err := in.client.PutBudget(ctx, "default", &bad); err == nil {
			t.Errorf("budget %s was accepted", bad.Name)
		}
	}
}
