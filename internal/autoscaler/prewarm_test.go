package autoscaler

import (
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestPrewarmBeforeDailyBatch: a batch of 12 one-node jobs at 02:00 every
// day for five days, with each job's node idle an hour later. The replay
// finds that booting ahead costs no more node time than the 120 s
// reference (the batch's nodes boot anyway, and leave sooner) and saves
// the batch's waits; so a boot time before 02:00 on the sixth day Plan
// boots 12 nodes and asks to be woken then, and at 01:00 it boots none.
func TestPrewarmBeforeDailyBatch(t *testing.T) {
	h := NewGapHistory()
	day0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	for d := range 5 {
		batch := day0.AddDate(0, 0, d).Add(2 * time.Hour)
		for k := range 12 {
			h.Demand(batch.Add(time.Duration(k)*time.Second), 1)
		}
		for k := range 12 {
			h.NodeIdle(batch.Add(time.Hour + time.Duration(k)*time.Second))
		}
		// Some background: one job an hour.
		for hr := 4; hr < 24; hr++ {
			h.Demand(day0.AddDate(0, 0, d).Add(time.Duration(hr)*time.Hour), 1)
			h.NodeIdle(day0.AddDate(0, 0, d).Add(time.Duration(hr)*time.Hour + 30*time.Minute))
		}
	}
	h.setting, h.learned = h.bestSetting(), true
	if !h.setting.prewarm {
		t.Fatalf("setting %+v: want pre-warming chosen", h.setting)
	}
	day5 := day0.AddDate(0, 0, 5)
	c := cluster(0, 50, nil, nil)
	c.Policy, c.Gaps = AdaptivePolicy, h
	res := Plan(Snapshot{Computes: []Compute{c}}, day5.Add(2*time.Hour-h.BootTime), BuiltinPolicies())
	if got := actions(res); len(got) != 1 || res.Targets["a"] != 12 {
		t.Errorf("a boot time before the batch: actions %v, target %d; want 12 nodes created", got, res.Targets["a"])
	}
	res = Plan(Snapshot{Computes: []Compute{c}}, day5.Add(time.Hour), BuiltinPolicies())
	if len(res.Actions) != 0 || !res.NextWake.Equal(day5.Add(2*time.Hour-h.BootTime)) {
		t.Errorf("at 01:00: actions %v, next wake %v; want none, and a wake a boot time before 02:00", actions(res), res.NextWake)
	}
	// Once the batch has come, its nodes are not booted again.
	for k := range 12 {
		h.Demand(day5.Add(2*time.Hour+time.Duration(k)*time.Second), 1)
	}
	c.Nodes = nodes("b", api.NodeRunning, 12, 0)
	res = Plan(Snapshot{Computes: []Compute{c}}, day5.Add(2*time.Hour+time.Minute), BuiltinPolicies())
	if res.Targets["a"] != 12 || len(res.Actions) != 0 {
		t.Errorf("after the batch came: actions %v, target %d; want 12 (the busy nodes) and nothing created", actions(res), res.Targets["a"])
	}
}
