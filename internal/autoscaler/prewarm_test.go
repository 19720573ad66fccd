package autoscaler

import (
	"math/rand/v2"
	"slices"
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

// TestPrewarmJudgedByDays: a batch of 40 one-node jobs within 30 s at
// 02:00 every day for a week, over Poisson background jobs (one every 30
// minutes on average), run times exponential (means 20 and 10 minutes),
// like the simulator's generated daily-batch traces. Pre-warming saves the
// batch's waits once a day; judged in 16 spans of as many events, it
// gained in the few spans that hold a batch and tied in the rest, and was
// refused however regular the gain (a t statistic of gains that are zero
// in half the spans stays under tMin). Judged day by day (dayCuts) it is
// taken.
func TestPrewarmJudgedByDays(t *testing.T) {
	h := NewGapHistory()
	day0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(1, 2))
	type ev struct {
		at   time.Time
		idle bool
	}
	var evs []ev
	job := func(at time.Time, mean time.Duration) {
		run := max(30*time.Second, time.Duration(r.ExpFloat64()*float64(mean)))
		evs = append(evs, ev{at, false}, ev{at.Add(run), true})
	}
	for d := range 7 {
		for range 40 {
			job(day0.AddDate(0, 0, d).Add(2*time.Hour+time.Duration(r.Float64()*float64(30*time.Second))), 20*time.Minute)
		}
	}
	for at := day0; at.Before(day0.AddDate(0, 0, 7)); at = at.Add(time.Duration(r.ExpFloat64() * float64(30*time.Minute))) {
		job(at, 10*time.Minute)
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	for _, e := range evs {
		if e.idle {
			h.NodeIdle(e.at)
		} else {
			h.Demand(e.at, 1)
		}
	}
	if s := h.bestSetting(); !s.prewarm {
		t.Errorf("setting %+v: want pre-warming chosen", s)
	}
}

// TestDayCuts: the cuts are the midnights inside the log, or every few of
// them when there are more than parts-1.
func TestDayCuts(t *testing.T) {
	day := int64(24 * time.Hour)
	if got := dayCuts([]logEvent{{At: 6 * int64(time.Hour)}, {At: 3*day + 18*int64(time.Hour)}}); !slices.Equal(got, []int64{day, 2 * day, 3 * day}) {
		t.Errorf("3.5 days from 06:00: cuts %v, want the 3 midnights", got)
	}
	if got := dayCuts([]logEvent{{At: 1}, {At: day - 1}}); len(got) != 0 {
		t.Errorf("within a day: cuts %v, want none", got)
	}
	if got := dayCuts([]logEvent{{At: 1}, {At: 40*day + 1}}); len(got) != 14 || got[0] != day || got[1] != 4*day {
		t.Errorf("40 days: %d cuts %v, want 14 every 3 days from the first midnight", len(got), got)
	}
}

// TestForecastIgnoresChanceRecurrence: on three days with jobs in 600 of
// the 1,440 minutes, about 100 minutes have jobs on all three by chance,
// and a batch at 02:00 every day cannot be told from them: nothing is
// predicted. With jobs in 30 minutes a day, the batch is predicted.
func TestForecastIgnoresChanceRecurrence(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	day := int64(24 * time.Hour)
	for _, tc := range []struct {
		busy int
		want bool
	}{{600, false}, {30, true}} {
		var p profile
		for d := int64(0); d < 3; d++ {
			p.add(d*day+2*int64(time.Hour), 10)
			for _, m := range r.Perm(slotsPerDay)[:tc.busy] {
				p.add(d*day+int64(m)*int64(time.Minute), 1)
			}
		}
		p.predict(3)
		if got := p.pred[120] >= 10; got != tc.want {
			t.Errorf("jobs in %d minutes a day: 02:00 predicted %d nodes, want predicted %v", tc.busy, p.pred[120], tc.want)
		}
	}
}

// TestPredictsAfterAWeek: a batch at 02:00 every day is predicted from
// the fourth day on, and still after the profile's seven days have filled
// and its rows are reused (a row holding a later day counted as a day
// without demand, so nothing was predicted after a compute's first week).
func TestPredictsAfterAWeek(t *testing.T) {
	day := int64(24 * time.Hour)
	var p profile
	for d := int64(0); d < 20; d++ {
		p.add(d*day+int64(time.Minute), 1) // a day begins: predict
		if want := d >= recurDays; (p.pred[120] == 10) != want {
			t.Errorf("day %d: 02:00 predicted %d nodes, want predicted %v", d, p.pred[120], want)
		}
		p.add(d*day+2*int64(time.Hour), 10)
	}
}
