package autoscaler

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// history returns a history fed with pairs of a node turning idle and a
// one-node job gap later, every period, n times.
func history(gap, period time.Duration, n int) *GapHistory {
	h := NewGapHistory()
	at := t0.Add(-time.Duration(n) * period)
	for range n {
		h.NodeIdle(at)
		h.Demand(at.Add(gap), 1)
		at = at.Add(period)
	}
	return h
}

func TestGapHistoryKeepAlive(t *testing.T) {
	if _, ok := NewGapHistory().KeepAlive(); ok {
		t.Error("an empty history recommends a keep-alive")
	}
	tests := []struct {
		name     string
		h        *GapHistory
		min, max time.Duration
	}{
		// Reuse 45 s later is cheaper than a 180 s boot: keep just past it.
		{"short gaps are kept", history(45*time.Second, 10*time.Minute, 500), 50 * time.Second, 60 * time.Second},
		// Reuse 20 min later costs more idle time than a boot: let go.
		{"long gaps are not", history(20*time.Minute, time.Hour, 500), 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := tc.h.KeepAlive(); !ok || got < tc.min || got > tc.max {
				t.Errorf("keep-alive %v, want within [%v, %v]", got, tc.min, tc.max)
			}
		})
	}
}

func TestAdaptiveDecide(t *testing.T) {
	burst := NewGapHistory()
	for i := range 10 { // ten one-node jobs in the last 100 s
		burst.Demand(t0.Add(-time.Duration(100-10*i)*time.Second), 1)
	}
	gang := NewGapHistory()
	gang.Demand(t0.Add(-10*time.Second), 8)
	lone := NewGapHistory()
	lone.Demand(t0.Add(-10*time.Second), 1)
	idle := nodes("i", api.NodeIdle, 3, time.Minute)
	tests := []struct {
		name     string
		c        Compute
		warm     int
		timeout  time.Duration
		fallback bool
	}{
		{name: "no history behaves like fixed", c: cluster(0, 20, nil, nil), warm: 0, timeout: 120 * time.Second, fallback: true},
		{name: "a lone job warms nothing", c: Compute{Gaps: lone}, warm: 0, timeout: 120 * time.Second},
		// 10 nodes asked for in the last 3 min may stay; 0.9 × the 10 jobs
		// of the last 2 min = 9 may be booted ahead of demand.
		{name: "a burst boots warm nodes", c: Compute{Gaps: burst}, warm: 9},
		{name: "idle nodes are kept up to the recent demand", c: Compute{Gaps: burst, Nodes: idle}, warm: 10},
		{name: "counted idle nodes count", c: Compute{Gaps: burst, Counted: NodeCounts{Idle: 7}}, warm: 10},
		// One 8-node job: 8 nodes may stay, but one submit boots nothing.
		{name: "a gang job is one submit", c: Compute{Gaps: gang}, warm: 0},
		{name: "a gang job keeps its idle nodes", c: Compute{Gaps: gang, Nodes: idle}, warm: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.IdleTimeout = 120 * time.Second
			d := Adaptive{}.Decide(&tc.c, t0)
			if d.Warm != tc.warm {
				t.Errorf("warm %d, want %d", d.Warm, tc.warm)
			}
			if tc.timeout != 0 && d.IdleTimeout != tc.timeout {
				t.Errorf("idle timeout %v, want the compute's %v until the history has learned", d.IdleTimeout, tc.timeout)
			}
			if tc.fallback && d != (Fixed{}).Decide(&tc.c, t0) {
				t.Errorf("decision %+v, want Fixed's", d)
			}
		})
	}
}

// TestAdaptiveKeepsWarmNodes checks the policy through Plan: idle nodes
// within the recent demand stay past their timeout, the rest leave.
func TestAdaptiveKeepsWarmNodes(t *testing.T) {
	h := NewGapHistory()
	for i := range 4 {
		h.Demand(t0.Add(-time.Duration(30+i)*time.Second), 1)
	}
	c := cluster(0, 20, nodes("i", api.NodeIdle, 6, time.Hour), nil)
	c.Policy, c.Gaps = AdaptivePolicy, h
	res := Plan(Snapshot{Computes: []Compute{c}}, t0, BuiltinPolicies())
	if got := actions(res); len(got) != 2 || res.Targets["a"] != 4 {
		t.Errorf("actions %v target %d, want 2 deletes and target 4", got, res.Targets["a"])
	}
}

// TestReasonsUnchanged pins the reason texts built without fmt to the
// fmt forms they replaced.
func TestReasonsUnchanged(t *testing.T) {
	got := createReason(5, 1, 2, 3, 4, 0, 10, 2, 1)
	want := fmt.Sprintf("scaling to %d nodes: %d busy, %d queued jobs need %d, %d warm, min_instances %d, cap %d; have %d (%d preparing)", 5, 1, 2, 3, 4, 0, 10, 2, 1)
	if got != want {
		t.Errorf("createReason = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		d, unit time.Duration
		want    string
	}{{125 * time.Second, time.Second, "125s"}, {1500 * time.Millisecond, time.Second, "1s"}, {1500 * time.Millisecond, 500 * time.Millisecond, "1.5s"}} {
		if got := seconds(tc.d, tc.unit); got != tc.want {
			t.Errorf("seconds(%v, %v) = %q, want %q", tc.d, tc.unit, got, tc.want)
		}
	}
}

// TestGapHistorySurvivesJSON: a history saved and restored decides as the
// original does, and keeps learning the same way.
func TestGapHistorySurvivesJSON(t *testing.T) {
	h := NewGapHistory()
	base := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(5, 5))
	at := base
	for range 500 {
		at = at.Add(time.Duration(r.IntN(600)) * time.Second)
		h.NodeIdle(at)
		at = at.Add(time.Duration(r.IntN(900)) * time.Second)
		h.Demand(at, 1+r.IntN(2))
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var g GapHistory
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	hk, hok := h.KeepAlive()
	gk, gok := g.KeepAlive()
	if hk != gk || hok != gok || h.Closed() != g.Closed() {
		t.Fatalf("keep-alive %v/%v and %d closed, restored %v/%v and %d", hk, hok, h.Closed(), gk, gok, g.Closed())
	}
	for _, since := range []time.Duration{time.Minute, 10 * time.Minute, time.Hour} {
		if a, b := h.DemandSince(at.Add(-since)), g.DemandSince(at.Add(-since)); a != b {
			t.Errorf("demand in the last %s: %d, restored %d", since, a, b)
		}
	}
	// Both keep learning alike.
	for range 200 {
		at = at.Add(time.Duration(r.IntN(300)) * time.Second)
		h.NodeIdle(at)
		g.NodeIdle(at)
		at = at.Add(time.Duration(r.IntN(300)) * time.Second)
		h.Demand(at, 1)
		g.Demand(at, 1)
	}
	if hk, _ := h.KeepAlive(); hk != func() time.Duration { k, _ := g.KeepAlive(); return k }() {
		t.Errorf("after more gaps: keep-alive %v, restored one %v", hk, func() time.Duration { k, _ := g.KeepAlive(); return k }())
	}
	if err := json.Unmarshal([]byte(`{"bins":{"99999":1}}`), &g); err == nil {
		t.Error("a bin out of range was accepted")
	}
}
