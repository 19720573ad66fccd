package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

func TestPeriodStart(t *testing.T) {
	now := time.Date(2026, 11, 26, 15, 4, 5, 0, time.UTC) // a Thursday
	custom := &api.Budget{Period: api.BudgetCustom, Start: now.Add(-time.Hour), End: now.Add(time.Hour)}
	for _, tt := range []struct {
		b    *api.Budget
		want time.Time
		ok   bool
	}{
		{&api.Budget{Period: api.BudgetMonthly}, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), true},
		{&api.Budget{Period: api.BudgetWeekly}, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), true},
		{&api.Budget{Period: api.BudgetDaily}, time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), true},
		{custom, now.Add(-time.Hour), true},
		{&api.Budget{Period: api.BudgetCustom, Start: now.Add(time.Hour), End: now.Add(2 * time.Hour)}, now.Add(time.Hour), false},
	} {
		got, ok := PeriodStart(tt.b, now)
		if !got.Equal(tt.want) || ok != tt.ok {
			t.Errorf("%s: %v, %v; want %v, %v", tt.b.Period, got, ok, tt.want, tt.ok)
		}
	}
	// A week starts on Monday, also when now is a Sunday.
	sunday := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	if got, _ := PeriodStart(&api.Budget{Period: api.BudgetWeekly}, sunday); !got.Equal(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("Sunday's week starts %v", got)
	}
}

func TestDueThresholds(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	b := &api.Budget{Amount: 10, Thresholds: []float64{50, 80, 100}}
	if due := DueThresholds(b, start, 4.99); len(due) != 0 {
		t.Errorf("under 50%%: %v", due)
	}
	if due := DueThresholds(b, start, 8.5); !slices.Equal(due, []float64{50, 80}) {
		t.Errorf("at 85%%: %v, want 50 and 80", due)
	}
	b.Alerts = []api.BudgetAlert{{Threshold: 50, PeriodStart: start}, {Threshold: 80, PeriodStart: start.AddDate(0, -1, 0)}}
	if due := DueThresholds(b, start, 12); !slices.Equal(due, []float64{80, 100}) {
		t.Errorf("at 120%% with 50 sent this period and 80 last: %v, want 80 and 100", due)
	}
}
