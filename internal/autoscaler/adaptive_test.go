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
	if _, _, ok := NewGapHistory().KeepAlive(t0); ok {
		t.Error("an empty history recommends a keep-alive")
	}
	tests := []struct {
		name     string
		h        *GapHistory
		min, max time.Duration
	}{
		// Reuse 45 s later: the 120 s reference catches every gap, and
		// so must the choice.
		{"short gaps are kept", history(45*time.Second, 10*time.Minute, 500), 50 * time.Second, 120 * time.Second},
		// Reuse 20 min later: 120 s catches none, so letting go at once
		// costs less, but makes no fewer jobs wait: a gain on node time
		// alone is not enough to leave the reference (minGain: on the
		// generated training traces such choices lengthened the waits).
		// Every 61 minutes, so that no minute of the day recurs: jobs at
		// the same minutes every day are pre-warmed instead.
		{"long gaps keep the reference", history(20*time.Minute, 61*time.Minute, 500), 120 * time.Second, 120 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, warm, ok := tc.h.KeepAlive(t0)
			if !ok || got < tc.min || got > tc.max || warm != 0 {
				t.Errorf("keep-alive %v (warm %d), want within [%v, %v] and no warm node", got, warm, tc.min, tc.max)
			}
		})
	}
}

// TestKeepAliveByHour: a compute whose nodes are reused within minutes by
// day and not at all by night keeps them by day and lets them go by
// night, where a fixed 120 s does neither well.
func TestKeepAliveByHour(t *testing.T) {
	h := NewGapHistory()
	at := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	// Every 10 minutes and 1 second for two weeks: the same minutes every
	// day would be pre-warmed (TestPrewarmBeforeDailyBatch), and the
	// timeouts are what this test is about.
	for range 14 * 24 * 6 {
		h.NodeIdle(at)
		if hr := at.Hour(); hr >= 9 && hr < 17 {
			h.Demand(at.Add(4*time.Minute), 1) // reused after 4 min by day
		} else {
			h.Demand(at.Add(30*time.Minute), 1) // by night much later
		}
		at = at.Add(10*time.Minute + time.Second)
	}
	day, _, ok := h.KeepAlive(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	night, _, _ := h.KeepAlive(time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC))
	if !ok || day < 4*time.Minute || day > 5*time.Minute || night != 0 {
		t.Errorf("keep-alive %v by day, %v by night; want just over 4 min by day and 0 by night", day, night)
	}
}

func TestAdaptiveDecide(t *testing.T) {
	learned := NewGapHistory()
	learned.setting.warm, learned.learned = 2, true
	for k := range learned.setting.keep {
		learned.setting.keep[k] = time.Duration(k) * time.Minute
	}
	instant := NewGapHistory()
	instant.BootTime = 0
	idle := nodes("i", api.NodeIdle, 3, time.Minute)
	tests := []struct {
		name    string
		c       Compute
		warm    int
		timeout time.Duration
	}{
		{name: "no history behaves like fixed", c: cluster(0, 20, nil, nil), timeout: 120 * time.Second},
		{name: "before it has learned, the compute's idle time", c: Compute{Gaps: NewGapHistory()}, timeout: 120 * time.Second},
		{name: "the hour's timeout", c: Compute{Gaps: learned, Nodes: idle}, warm: 2, timeout: 12 * time.Minute},
		// Warm nodes are only kept, never booted.
		{name: "no idle node, none warm", c: Compute{Gaps: learned}, warm: 0, timeout: 12 * time.Minute},
		{name: "counted idle nodes count", c: Compute{Gaps: learned, Counted: NodeCounts{Idle: 1}}, warm: 1, timeout: 12 * time.Minute},
		// Nor are the idle nodes a queued gang holds warm: counting them
		// booted a node more than the gang needed.
		{name: "idle nodes the queue holds are not warm", c: Compute{Gaps: learned, Nodes: idle, Max: 20, QuotaMaxNodes: 20, Queued: []Demand{{Job: "g", Instances: 8}}}, warm: 0, timeout: 12 * time.Minute},
		{name: "idle nodes beyond the queue's are", c: Compute{Gaps: learned, Nodes: idle, Max: 20, QuotaMaxNodes: 20, Queued: []Demand{{Job: "j", Instances: 1}}}, warm: 2, timeout: 12 * time.Minute},
		{name: "a boot time of 0 keeps nothing", c: Compute{Gaps: instant, Nodes: idle}, warm: 0, timeout: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.IdleTimeout = 120 * time.Second
			d := Adaptive{}.Decide(&tc.c, t0)
			if d.Warm != tc.warm || d.IdleTimeout != tc.timeout {
				t.Errorf("warm %d, idle timeout %v; want %d, %v", d.Warm, d.IdleTimeout, tc.warm, tc.timeout)
			}
		})
	}
}

// TestAdaptiveKeepsWarmNodes checks the policy through Plan: the most
// recently idle nodes within the warm count stay past their timeout, the
// rest leave.
func TestAdaptiveKeepsWarmNodes(t *testing.T) {
	h := NewGapHistory()
	h.setting.warm, h.learned = 4, true
	c := cluster(0, 20, nodes("i", api.NodeIdle, 6, time.Hour), nil)
	c.Policy, c.Gaps = AdaptivePolicy, h
	res := Plan(Snapshot{Computes: []Compute{c}}, t0, BuiltinPolicies())
	if got := actions(res); len(got) != 2 || res.Targets["a"] != 4 {
		t.Errorf("actions %v target %d, want 2 deletes and target 4", got, res.Targets["a"])
	}
}

// TestAdaptiveBootsOnlyWhatTheGangNeeds: an eight-node gang arrives to
// one warm idle node; Plan boots the seven it lacks, not one more for the
// warm count.
func TestAdaptiveBootsOnlyWhatTheGangNeeds(t *testing.T) {
	h := NewGapHistory()
	h.setting.warm, h.learned = 1, true
	c := cluster(0, 20, nodes("i", api.NodeIdle, 1, time.Minute), []Demand{{Job: "g", Instances: 8}})
	c.Policy, c.Gaps = AdaptivePolicy, h
	res := Plan(Snapshot{Computes: []Compute{c}}, t0, BuiltinPolicies())
	if got := actions(res); len(got) != 1 || got[0] != "create 7" || res.Targets["a"] != 8 {
		t.Errorf("actions %v target %d, want create 7 and target 8", got, res.Targets["a"])
	}
}

// TestReplayMatchesFixedByHand: the replay the policy chooses by prices a
// fixed timeout as worked out by hand.
func TestReplayMatchesFixedByHand(t *testing.T) {
	s := int64(time.Second)
	log := []logEvent{
		{At: 0},                 // node a idle
		{At: 100 * s},           // node b idle
		{At: 150 * s, Nodes: 1}, // takes b (50 s idle)
		{At: 500 * s, Nodes: 2}, // a left at 120 s (120 s idle); two boots, waits
		{At: 600 * s},           // c idle: held for the waiting job until 680 s (80 s)
	}
	var c candidate
	for k := range c.keep {
		c.keep[k] = 120 * time.Second
	}
	// The job waits 180 s, one boot time: the boots done at 680 s are let
	// finish after the log ends.
	if o := replay(log, &c, 180*time.Second, nil, outcome{}); o.cost != 50+120+2*180+80 || o.wait != 1 {
		t.Errorf("cost %v node-s, waits %v boot times; want 610, 1", o.cost, o.wait)
	}
	c.warm = 1 // a is beyond the warm count when it times out: the same
	if o := replay(log, &c, 180*time.Second, nil, outcome{}); o.cost != 610 || o.wait != 1 {
		t.Errorf("warm 1: cost %v node-s, waits %v boot times; want 610, 1", o.cost, o.wait)
	}
	// b is the only idle node: warm, it waits 300 s for the next job
	// instead of leaving at 120 s and making it wait for a boot.
	log = []logEvent{{At: 0}, {At: 50 * s, Nodes: 1}, {At: 100 * s}, {At: 400 * s, Nodes: 1}}
	if o := replay(log, &c, 180*time.Second, nil, outcome{}); o.cost != 50+300 || o.wait != 0 {
		t.Errorf("warm 1: cost %v node-s, waits %v boot times; want 350, 0", o.cost, o.wait)
	}
	c.warm = 0
	if o := replay(log, &c, 180*time.Second, nil, outcome{}); o.cost != 50+120+180 || o.wait != 1 {
		t.Errorf("warm 0: cost %v node-s, waits %v boot times; want 350, 1", o.cost, o.wait)
	}
	// A node that turns idle while a job waits for its boot goes to that
	// job, which starts 60 s after it came; the node booted for it turns
	// idle at 180 s and serves the next job at 200 s, which waits not at
	// all (the replay used to charge each a whole boot and wait).
	log = []logEvent{{At: 0, Nodes: 1}, {At: 60 * s}, {At: 200 * s, Nodes: 1}}
	if o := replay(log, &c, 180*time.Second, nil, outcome{}); o.cost != 180+20 || o.wait != 60.0/180 {
		t.Errorf("node freed during a boot: cost %v node-s, waits %v boot times; want 200, 1/3", o.cost, o.wait)
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
	if h.setting != g.setting || h.learned != g.learned || h.Closed() != g.Closed() {
		t.Fatalf("setting %+v (%v) and %d closed, restored %+v (%v) and %d", h.setting, h.learned, h.Closed(), g.setting, g.learned, g.Closed())
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
	if h.setting != g.setting || h.Closed() != g.Closed() {
		t.Errorf("after more gaps: setting %+v, restored one %+v", h.setting, g.setting)
	}
	// A history saved before the hourly histograms: its open gaps and
	// demand stay, it learns again.
	old := `{"boot_time":180000000000,"bins":{"3":2},"over":1,"weight":3,"pending":["2026-11-24T09:00:00Z"],"seen":3,"keep":50000000000}`
	if err := json.Unmarshal([]byte(old), &g); err != nil || len(g.pending) != 1 || g.learned {
		t.Errorf("an older saved history: %v, %d open gaps, learned %v; want it read, 1 open gap, not learned", err, len(g.pending), g.learned)
	}
	for _, bad := range []string{`{"hour_bins":{"3":{"99999":1}}}`, `{"hour_bins":{"24":{"1":1}}}`, `{"hourly_keep":[1,2]}`} {
		if err := json.Unmarshal([]byte(bad), &g); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}

// TestChoicesAtMostEveryTwoHours: a compute closing hundreds of gaps a
// minute chooses its setting at most once every chooseEvery (each choice
// replays the whole log under every candidate); the choice that came due
// is made at the first submit that long after the last.
func TestChoicesAtMostEveryTwoHours(t *testing.T) {
	h := NewGapHistory()
	at := t0
	for range 600 { // 600 gaps in 10 minutes
		h.NodeIdle(at)
		h.Demand(at.Add(500*time.Millisecond), 1)
		at = at.Add(time.Second)
	}
	first := h.chosen
	if !h.learned || first == 0 || !h.due {
		t.Fatalf("learned %v, chosen at %v, due %v: want a first choice and a later one due", h.learned, first, h.due)
	}
	h.NodeIdle(t0.Add(119 * time.Minute))
	h.Demand(t0.Add(119*time.Minute+time.Second), 1)
	if h.chosen != first {
		t.Errorf("chose again %v after the first choice, want at most once every two hours", time.Duration(h.chosen-first))
	}
	h.NodeIdle(t0.Add(121 * time.Minute))
	h.Demand(t0.Add(121*time.Minute+time.Second), 1)
	if h.chosen == first || h.due {
		t.Errorf("no choice two hours later (due %v)", h.due)
	}
}

// TestGainMustBeSure: a candidate is taken only when its gains over the
// Reference, span by span, are large against how much they vary, on node
// time and on waiting: not one whose gain comes from one span, nor one
// that only ties on waiting.
func TestGainMustBeSure(t *testing.T) {
	// The Reference costs 10 node-s and waits one boot time in each span.
	var ref []outcome
	for k := 1; k <= parts; k++ {
		ref = append(ref, outcome{10 * float64(k), float64(k)})
	}
	// spans returns a candidate's running outcomes (at the cuts, total)
	// for a cost and a wait in each span.
	spans := func(cost, wait func(k int) float64) (*replayBuf, outcome) {
		buf := &replayBuf{}
		var o outcome
		for k := range parts {
			o.cost += cost(k)
			o.wait += wait(k)
			buf.at = append(buf.at, o)
		}
		buf.at = buf.at[:parts-1]
		return buf, o
	}
	steady := func(int) float64 { return 0.5 }
	tests := []struct {
		name       string
		cost, wait func(k int) float64
		want       bool
	}{
		{"gains in every span", func(k int) float64 { return 8 + float64(k%2) }, steady, true},
		{"gains from one span", func(k int) float64 { return 10 - 30*float64(min(1, k/(parts-1))) }, func(k int) float64 { return 1 - float64(min(1, k/(parts-1))) }, false},
		{"ties on waiting", func(int) float64 { return 5 }, func(int) float64 { return 1 }, false},
		{"gains but loses one span a little", func(k int) float64 { return 7 + 4*float64(min(1, k/(parts-1))) }, steady, true},
		{"waits longer", func(int) float64 { return 5 }, func(int) float64 { return 1.5 }, false},
	}
	for _, tc := range tests {
		buf, o := spans(tc.cost, tc.wait)
		if got := confident(buf, o, ref); got != tc.want {
			t.Errorf("%s: confident %v, want %v", tc.name, got, tc.want)
		}
	}
	// The cuts split the log into spans of as many events.
	log := make([]logEvent, 8*parts)
	for i := range log {
		log[i].At = int64(i)
	}
	buf := &replayBuf{}
	buf.cutLog(log, 0)
	if len(buf.cuts) != parts-1 || buf.cuts[0] != log[len(log)/parts].At {
		t.Errorf("cuts %v, want %d cuts from %d", buf.cuts, parts-1, log[len(log)/parts].At)
	}
	// A log of 4 boot times is cut in 2 spans of at least spanBoots boot
	// times: shorter ones would split a boot's cost from the wait it ends.
	buf.cutLog(log, time.Duration(log[len(log)-1].At-log[0].At)/4)
	if len(buf.cuts) != 1 || buf.cuts[0] != log[len(log)/2].At {
		t.Errorf("cuts %v of a log 4 boot times long, want one at %d", buf.cuts, log[len(log)/2].At)
	}
}

// TestHopelessNeverStopsAConfidentReplay: a replay stops at a cut only
// when no rest of it could pass confident, drawn over random span gains
// (each span's candidate spend at least zero), and it does stop one that
// lost badly early.
func TestHopelessNeverStopsAConfidentReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 23))
	stopped, taken := 0, 0
	for range 20000 {
		var ref, cand []outcome
		var rc, cc outcome
		// The candidate spends, per span, a share of the Reference's:
		// less in every span (a sure gain), or less or more.
		most := 0.9 + rng.Float64()*0.6
		for range parts {
			sc, sw := rng.Float64()*10, rng.Float64()*2
			rc.cost += sc
			rc.wait += sw
			ref = append(ref, rc)
			f := rng.Float64() * most
			if rng.IntN(8) == 0 {
				f = rng.Float64() * 3
			}
			cc.cost += f * sc
			cc.wait += rng.Float64() * most * sw
			cand = append(cand, cc)
		}
		buf := &replayBuf{at: cand[:parts-1], cuts: make([]int64, parts-1)}
		ok := confident(buf, cand[parts-1], ref)
		if ok {
			taken++
		}
		r := &replayer{replayBuf: &replayBuf{cuts: buf.cuts, ref: ref}}
		for _, o := range cand[:parts-1] {
			r.at = append(r.at, outcome{o.cost * 1e9, o.wait}) // node nanoseconds while replaying
		}
		for k := 1; k < parts; k++ {
			if r.hopeless(k) {
				stopped++
				if ok {
					t.Fatalf("stopped at span %d a replay confident takes: ref %v, candidate %v", k, ref, cand)
				}
				break
			}
		}
	}
	if stopped == 0 || taken == 0 {
		t.Errorf("%d replays stopped early, %d taken: want some of each", stopped, taken)
	}
}
