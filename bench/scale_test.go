package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/tidetest/simagent"
)

// scaleSizes is how big the control-plane benchmark is. `make bench` runs
// the size (TIDE_BENCH=full); each figure can be set alone for a
// quick look at another size.
type scaleSizes struct {
	Nodes    int           // sim nodes (TIDE_SCALE_NODES)
	Computes int           // computes the nodes and jobs are spread over (TIDE_SCALE_COMPUTES)
	Queued   int           // jobs left queued behind the busy nodes (TIDE_SCALE_JOBS)
	Clients  int           // submitting clients
	Rounds   int           // rounds of Batch completions + Batch arrivals (TIDE_SCALE_ROUNDS)
	Batch    int           //
	Window   time.Duration // heartbeat measurement (TIDE_SCALE_WINDOW)
	// Heartbeat is the server's heartbeat_interval (TIDE_SCALE_HEARTBEAT):
	// the default 2 s in the small size; 10 s at 10,000 nodes, as a
	// Kubernetes node renews its lease, since at 2 s the heartbeats alone
	// need more than the machine's two cores (see the README).
	Heartbeat time.Duration
	Queries   int // job list and job show requests each
}

func scaleSizesFromEnv() scaleSizes {
	s := scaleSizes{Nodes: 200, Computes: 4, Queued: 2000, Clients: 16, Rounds: 5, Batch: 20, Window: 3 * time.Second, Queries: 50, Heartbeat: 2 * time.Second}
	if os.Getenv("TIDE_BENCH") == "full" {
		s = scaleSizes{Nodes: 10000, Computes: 200, Queued: 100000, Clients: 16, Rounds: 20, Batch: 100, Window: 30 * time.Second, Queries: 200, Heartbeat: 10 * time.Second}
	}
	for k, p := range map[string]*int{"TIDE_SCALE_NODES": &s.Nodes, "TIDE_SCALE_COMPUTES": &s.Computes, "TIDE_SCALE_JOBS": &s.Queued, "TIDE_SCALE_ROUNDS": &s.Rounds} {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			*p = v
		}
	}
	for k, p := range map[string]*time.Duration{"TIDE_SCALE_WINDOW": &s.Window, "TIDE_SCALE_HEARTBEAT": &s.Heartbeat} {
		if d, err := time.ParseDuration(os.Getenv(k)); err == nil && d > 0 {
			*p = d
		}
	}
	s.Batch = min(s.Batch, s.Nodes)
	return s
}

// scaleConfig is the server's (beside startTide's open admission limits):
// the heartbeat interval, and /metrics without a token (the turn histogram).
func (sz scaleSizes) config() string {
	return fmt.Sprintf("metrics_open: true\nheartbeat_interval: %s\n", sz.Heartbeat)
}

// heldPool is the sim agents holding an assignment, in the order they got it.
type heldPool struct {
	mu     sync.Mutex
	agents []*simagent.Agent
	more   chan struct{} // closed and replaced on every arrival
}

func newHeldPool(in <-chan *simagent.Agent) *heldPool {
	p := &heldPool{more: make(chan struct{})}
	go func() {
		for a := range in {
			p.mu.Lock()
			p.agents = append(p.agents, a)
			close(p.more)
			p.more = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	return p
}

// wait blocks until n agents hold an assignment, or d passes.
func (p *heldPool) wait(t testing.TB, what string, n int, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		p.mu.Lock()
		got, more := len(p.agents), p.more
		p.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s: %d of %d nodes hold a job", d, what, got, n)
		}
	}
}

// take removes the k agents that held their assignment longest.
func (p *heldPool) take(k int) []*simagent.Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]*simagent.Agent(nil), p.agents[:k]...)
	p.agents = p.agents[k:]
	return out
}

// submitter is the benchmark's clients, each its own api.Client.
type submitter struct {
	s       *tideServer
	clients []*api.Client
	n       int // jobs submitted so far, for round-robin over computes
	mu      sync.Mutex
	names   []string
}

func newSubmitter(s *tideServer, n int) *submitter {
	sub := &submitter{s: s}
	for range n {
		c, err := api.NewClient(s.url, s.token(), &http.Client{})
		if err != nil {
			s.t.Fatal(err)
		}
		sub.clients = append(sub.clients, c)
	}
	return sub
}

// submit sends n no-op jobs, spread round-robin over computes, from every
// client at once; it returns each request's latency and the elapsed time.
func (sub *submitter) submit(n, computes int) ([]time.Duration, time.Duration) {
	t := sub.s.t
	work := make(chan int, n)
	for i := range n {
		work <- sub.n + i
	}
	close(work)
	sub.n += n
	lat := make([][]time.Duration, len(sub.clients))
	errs := make(chan error, len(sub.clients))
	var wg sync.WaitGroup
	t0 := time.Now()
	for c, cl := range sub.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var names []string
			for i := range work {
				r0 := time.Now()
				j, err := cl.CreateJob(context.Background(), ws, &api.Job{Type: "command", Command: "true", Compute: fmt.Sprintf("sim%d", i%computes)})
				if err != nil {
					errs <- fmt.Errorf("submitting job %d: %w", i, err)
					return
				}
				lat[c] = append(lat[c], time.Since(r0))
				names = append(names, j.Name)
			}
			sub.mu.Lock()
			sub.names = append(sub.names, names...)
			sub.mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return all, elapsed
}

// token is the server's admin token, from its client config.
func (s *tideServer) token() string {
	cc, err := api.LoadClientConfig(s.dir + "/client.yaml")
	if err != nil {
		s.t.Fatal(err)
	}
	return cc.Token
}

// histogram is a Prometheus histogram's cumulative bucket counts.
type histogram struct {
	le     []float64
	counts []float64
}

// scrapeHistogram reads the histogram name from the server's /metrics.
func (s *tideServer) scrapeHistogram(name string) histogram {
	t := s.t
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h histogram
	sc := bufio.NewScanner(resp.Body)
	prefix := name + `_bucket{le="`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		b, err1 := strconv.ParseFloat(le, 64)
		c, err2 := strconv.ParseFloat(count, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("metrics: bad bucket line %q", sc.Text())
		}
		h.le, h.counts = append(h.le, b), append(h.counts, c)
	}
	if len(h.le) == 0 {
		t.Fatalf("metrics: no histogram %s", name)
	}
	return h
}

// scrapeCounter reads counter name from the server's /metrics (with the
// admin's token); 0 when the server has none (an older binary).
func (s *tideServer) scrapeCounter(name string) float64 {
	t := s.t
	req, err := http.NewRequest("GET", s.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metrics: bad line %q", sc.Text())
			}
			return f
		}
	}
	return 0
}

// sub returns the observations of h made since h0.
func (h histogram) sub(h0 histogram) histogram {
	d := histogram{le: h.le, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - h0.counts[i]
	}
	return d
}

func (h histogram) count() float64 { return h.counts[len(h.counts)-1] }

// buckets lists h's non-empty buckets as "le: count" (not cumulative).
func (h histogram) buckets() []string {
	var out []string
	below := 0.0
	for i, le := range h.le {
		if n := h.counts[i] - below; n > 0 {
			out = append(out, fmt.Sprintf("%g: %.0f", le, n))
		}
		below = h.counts[i]
	}
	return out
}

// quantile estimates the q-quantile the way Prometheus' histogram_quantile
// does: linear within the bucket that holds it.
func (h histogram) quantile(q float64) time.Duration {
	total := h.count()
	if total == 0 {
		return 0
	}
	rank := q * total
	lo, below := 0.0, 0.0
	for i, le := range h.le {
		if h.counts[i] >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(lo * float64(time.Second)) // beyond the last bound
			}
			f := (rank - below) / (h.counts[i] - below)
			return time.Duration((lo + f*(le-lo)) * float64(time.Second))
		}
		lo, below = le, h.counts[i]
	}
	return time.Duration(lo * float64(time.Second))
}

// scaleResult is what TestScale measured.
type scaleResult struct {
	sz                    scaleSizes
	beats                 simResult
	submitted             int
	submitLat             []time.Duration
	submitTime            time.Duration
	submitCPU             time.Duration // the server's, over the submissions
	placeAll              time.Duration // from the end of the submissions until every node held a job
	turns                 histogram
	rounds                []time.Duration
	list, show            []time.Duration
	listJobs              int
	hwmKB                 int64
	loadBefore, loadAfter float64
}

// TestScale measures the control plane at 10,000 sim nodes (TIDE_BENCH=full,
// a `make bench` section; a small size in `make test`): heartbeats, a burst
// of submissions from 16 clients, controller turns over a long queue, job
// list and show, and the server's peak memory. TIDE_BENCH_BIN runs
// another tide binary (an older commit's), to compare two back to back.
func TestScale(t *testing.T) {
	sz := scaleSizesFromEnv()
	if testing.Short() && os.Getenv("TIDE_BENCH") != "full" {
		t.Skip("the scale benchmark starts a server and simulated agents; run without -short or with make bench")
	}
	r := scaleResult{sz: sz}
	r.loadBefore = loadAvg()
	s := startTide(t, "", sz.config())
	defer s.halt()
	per := sz.Nodes / sz.Computes
	if per*sz.Computes != sz.Nodes {
		t.Fatalf("TIDE_SCALE_NODES %d: must be a multiple of TIDE_SCALE_COMPUTES %d", sz.Nodes, sz.Computes)
	}
	for c := range sz.Computes {
		s.putCompute(fmt.Sprintf("sim%d", c), "sim", per, per)
	}
	held := make(chan *simagent.Agent, sz.Nodes)
	pool := newHeldPool(held)
	fleet := s.startSimAgents(sz.Nodes, held)
	defer fleet.Stop()
	poll(t, fmt.Sprintf("%d idle sim nodes", sz.Nodes), 10*time.Minute, 200*time.Millisecond, func() bool {
		if err := fleet.Err(); err != nil {
			t.Fatal(err)
		}
		cs, err := s.client.Computes(context.Background(), ws)
		idle := 0
		for _, c := range cs {
			idle += c.NodeStateCounts.Idle
		}
		return err == nil && idle == sz.Nodes
	})

	// 1. Heartbeats of idle nodes. (The phases are logged as they start,
	// for a profile of one: go test -v prints them at once.)
	t.Logf("%s heartbeats of idle nodes for %s", time.Now().UTC().Format(time.TimeOnly), sz.Window)
	r.beats = s.measureBeats(fleet, sz.Window)
	t.Logf("%s heartbeats: %.1f %% of one core (%d in %s), server peak RSS so far %s MB", time.Now().UTC().Format(time.TimeOnly),
		100*r.beats.CPU.Seconds()/r.beats.Window.Seconds(), r.beats.Heartbeats, r.beats.Window, mb(r.beats.HWMKB))

	// 2. Submissions: enough to fill every node and leave Queued waiting.
	sub := newSubmitter(s, sz.Clients)
	r.submitted = sz.Nodes + sz.Queued
	t.Logf("%s submissions", time.Now().UTC().Format(time.TimeOnly))
	u0 := s.usage()
	r.submitLat, r.submitTime = sub.submit(r.submitted, sz.Computes)
	r.submitCPU = s.usage().CPU - u0.CPU
	t0 := time.Now()
	pool.wait(t, "every node to get a job", sz.Nodes, 20*time.Minute)
	r.placeAll = time.Since(t0)
	if err := fleet.Err(); err != nil {
		t.Fatal(err)
	}

	// 3. Controller turns: each round Batch nodes complete their job and
	// Batch jobs arrive; the round ends when Batch queued jobs started.
	t.Logf("%s rounds", time.Now().UTC().Format(time.TimeOnly))
	h0 := s.scrapeHistogram("tide_controller_turn_seconds")
	u0 = s.usage()
	for range sz.Rounds {
		r0 := time.Now()
		done := pool.take(sz.Batch)
		var wg sync.WaitGroup
		errs := make(chan error, len(done))
		for _, a := range done {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := a.Complete(context.Background()); err != nil {
					errs <- err
				}
			}()
		}
		sub.submit(sz.Batch, sz.Computes)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		pool.wait(t, "the queued jobs to start on the freed nodes", sz.Nodes, 5*time.Minute)
		r.rounds = append(r.rounds, time.Since(r0))
	}
	r.turns = s.scrapeHistogram("tide_controller_turn_seconds").sub(h0)
	t.Logf("%s rounds done: server CPU %.2f s; turns by bucket (le seconds: count) %v", time.Now().UTC().Format(time.TimeOnly),
		(s.usage().CPU - u0.CPU).Seconds(), r.turns.buckets())

	// 4. What a user asks while all this is queued.
	t.Logf("%s job list and job show", time.Now().UTC().Format(time.TimeOnly))
	ctx := context.Background()
	for i := range sz.Queries {
		q0 := time.Now()
		js, err := s.client.Jobs(ctx, ws, api.JobFilter{Compute: fmt.Sprintf("sim%d", i%sz.Computes)})
		if err != nil {
			t.Fatal(err)
		}
		r.list = append(r.list, time.Since(q0))
		r.listJobs = len(js)
	}
	for range sz.Queries {
		name := sub.names[rand.IntN(len(sub.names))]
		q0 := time.Now()
		if _, err := s.client.Job(ctx, ws, name); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.JobEvents(ctx, ws, name); err != nil {
			t.Fatal(err)
		}
		r.show = append(r.show, time.Since(q0))
	}
	if err := fleet.Err(); err != nil {
		t.Fatal(err)
	}
	r.hwmKB = s.usage().HWMKB
	r.loadAfter = loadAvg()
	r.table().write(os.Stdout)
}

// loadAvg is the machine's 1-minute load average.
func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func (r scaleResult) table() *table {
	sz := r.sz
	t := &table{title: fmt.Sprintf("5. Control plane at %d nodes (%d computes, %d jobs queued behind %d running; SQLite)", sz.Nodes, sz.Computes, sz.Queued, sz.Nodes),
		head: []string{"what", "measured", "target", ""}}
	beatCPU := 100 * r.beats.CPU.Seconds() / r.beats.Window.Seconds()
	t.add(fmt.Sprintf("heartbeats every %s: server CPU, %% of one core", sz.Heartbeat), fmt.Sprintf("%.1f %% (%d beats in %s, %.0f/s; %.0f µs each)", beatCPU, r.beats.Heartbeats, r.beats.Window, float64(r.beats.Heartbeats)/r.beats.Window.Seconds(), r.beats.CPU.Seconds()*1e6/float64(max(1, r.beats.Heartbeats))), "< 10 %", met(beatCPU < 10))
	rate := float64(r.submitted) / r.submitTime.Seconds()
	subP99 := percentile(r.submitLat, 99)
	t.add(fmt.Sprintf("submissions from %d clients", sz.Clients), fmt.Sprintf("%.0f/s (%d in %.1f s; server CPU %.2f ms each)", rate, r.submitted, r.submitTime.Seconds(), r.submitCPU.Seconds()*1000/float64(r.submitted)), "≥ 1,000/s", met(rate >= 1000))
	t.add("  their API latency p50 / p99", ms(percentile(r.submitLat, 50))+" / "+ms(subP99)+" ms", "p99 < 100 ms", met(subP99 < 100*time.Millisecond))
	turnP99 := r.turns.quantile(0.99)
	t.add(fmt.Sprintf("controller turn, %d rounds of %d completions + %d arrivals: p50 / p99", sz.Rounds, sz.Batch, sz.Batch),
		fmt.Sprintf("%s / %s ms (%.0f turns)", ms(r.turns.quantile(0.5)), ms(turnP99), r.turns.count()), "p99 < 20 ms", met(turnP99 < 20*time.Millisecond))
	t.add("  a round: completions sent to every freed node busy again, p50 / max", ms(percentile(r.rounds, 50))+" / "+ms(percentile(r.rounds, 100))+" ms", "-", "")
	listP99, showP99 := percentile(r.list, 99), percentile(r.show, 99)
	t.add(fmt.Sprintf("job list of one compute (%d jobs): p50 / p99", r.listJobs), ms(percentile(r.list, 50))+" / "+ms(listP99)+" ms", "p99 < 50 ms", met(listP99 < 50*time.Millisecond))
	t.add("job show (job + events): p50 / p99", ms(percentile(r.show, 50))+" / "+ms(showP99)+" ms", "p99 < 50 ms", met(showP99 < 50*time.Millisecond))
	t.add("server peak RSS", mb(r.hwmKB)+" MB", "< 1,024 MB", met(r.hwmKB < 1<<20))
	t.add("  every node busy, after the last submission", fmt.Sprintf("%.1f s", r.placeAll.Seconds()), "-", "")
	t.notes = []string{
		fmt.Sprintf("Agents are goroutines of the benchmark speaking the agent protocol over HTTP (register, assignment stream, heartbeats on it with what a real agent reports, running and completed reports) with the tokens the server issued to the fake provider's nodes; their requests share %d connections, their streams one each.", simagent.MaxConns),
		"Turn durations come from the server's tide_controller_turn_seconds histogram over the rounds (interpolated within buckets, as histogram_quantile does).",
		fmt.Sprintf("The benchmark's agents and clients share the machine's %d CPUs with the server; load average %.2f before, %.2f after.", runtime.NumCPU(), r.loadBefore, r.loadAfter),
	}
	return t
}
