package controller

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// turnBench is a store holding what TestScale's rounds hold (every node
// busy, a long queue behind them) and a controller that has taken its
// first turn over it.
type turnBench struct {
	st       store.Store
	c        *Controller
	now      time.Time
	computes int
	running  []string // node ids, in the order their jobs started
	seq      int
}

// benchSize reads a size from the environment (def when unset).
func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// newTurnBench stores nodes over computes, each node running a job, and
// queued jobs behind them, then takes the controller's first (full) turn.
func newTurnBench(tb testing.TB, nodes, computes, queued int) *turnBench {
	ctx := context.Background()
	// Not the test's temporary folder: testing cleans it up after each
	// run, and the state is kept between runs (benchState); TestMain
	// removes it.
	dir, err := os.MkdirTemp("", "turnbench")
	if err != nil {
		tb.Fatal(err)
	}
	benchDirs = append(benchDirs, dir)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	b := &turnBench{st: st, now: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC), computes: computes}
	per := nodes / computes
	mustUpdate(tb, b.st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		for c := range computes {
			cp := &api.Compute{Workspace: "ws", Name: fmt.Sprintf("sim%d", c), Size: "Standard_DS3_v2", Location: "sim",
				MinInstances: per, MaxInstances: per, IdleTimeBeforeScaleDown: 600, ProvisioningState: api.ProvisioningSucceeded}
			if p := os.Getenv("TIDE_TURN_POLICY"); p != "" {
				cp.Tide = &api.ComputeExtensions{ScaleDownPolicy: p}
			}
			if err := tx.PutCompute(ctx, cp, ""); err != nil {
				return err
			}
			for i := range per {
				id := fmt.Sprintf("sim%d-n%05d", c, i)
				j := b.job(api.JobRunning, c)
				j.Attempt, j.Ranks = 1, []api.JobRank{{Node: id}}
				if err := tx.PutJob(ctx, j, ""); err != nil {
					return err
				}
				n := &api.Node{ID: id, Workspace: "ws", Compute: cp.Name, Location: "sim", State: api.NodeRunning,
					Job: service.AssignmentID("ws", j.Name, 1), CreatedOn: b.now, RegisteredOn: b.now.Add(time.Second),
					StateSince: b.now, LastHeartbeat: b.now}
				if err := tx.PutNode(ctx, n); err != nil {
					return err
				}
				b.running = append(b.running, id)
			}
		}
		for i := range queued {
			if err := tx.PutJob(ctx, b.job(api.JobQueued, i%computes), ""); err != nil {
				return err
			}
		}
		return nil
	})
	cfg := config.Default()
	cfg.UnusableAfter = time.Hour // the nodes' heartbeats are not sent
	b.c = New(Options{Store: b.st, Catalog: catalog.Default(), Config: cfg, Changes: NewBroadcast(), Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return b.now }})
	b.turn(tb)
	b.turn(tb) // reads back the first turn's pending reasons
	return b
}

// benchDirs are the benchmarks' store folders, removed by TestMain.
var benchDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range benchDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// sharedBench is the benchmarks' turnBench, kept between runs (testing
// runs each benchmark with b.N = 1 first) and benchmarks: its setup takes
// a minute at 10,000 nodes.
var sharedBench = map[string]*turnBench{}

func benchState(b *testing.B) *turnBench {
	nodes, computes, jobs := benchSize("TIDE_TURN_NODES", 2000), benchSize("TIDE_TURN_COMPUTES", 40), benchSize("TIDE_TURN_JOBS", 20000)
	k := fmt.Sprint(nodes, computes, jobs, os.Getenv("TIDE_TURN_POLICY"))
	if sharedBench[k] == nil {
		sharedBench[k] = newTurnBench(b, nodes, computes, jobs)
	}
	return sharedBench[k]
}

// job returns a new job of compute c in status.
func (b *turnBench) job(status string, c int) *api.Job {
	b.seq++
	b.now = b.now.Add(time.Microsecond)
	return &api.Job{Workspace: "ws", Name: fmt.Sprintf("j%07d", b.seq), Type: api.JobTypeCommand, Command: "true",
		Compute: fmt.Sprintf("sim%d", c), Status: status, CreatedOn: b.now}
}

// round completes the jobs of the k nodes that ran theirs longest (their
// nodes turn idle, as an agent's report makes them) and submits k jobs.
func (b *turnBench) round(tb testing.TB, k int) {
	ctx := context.Background()
	b.now = b.now.Add(10 * time.Millisecond)
	done := b.running[:k]
	b.running = append(b.running[k:k:k], b.running[k:]...)
	mustUpdate(tb, b.st, func(tx store.Tx) error {
		for _, id := range done {
			n, err := tx.GetNode(ctx, id)
			if err != nil {
				return err
			}
			_, rest, _ := cutKey(n.Job)
			j, err := tx.GetJob(ctx, "ws", rest)
			if err != nil {
				return err
			}
			j.Status, j.EndTime = api.JobCompleted, b.now
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
			n.State, n.Job, n.StateSince = api.NodeIdle, "", b.now
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
		}
		for i := range k {
			if err := tx.PutJob(ctx, b.job(api.JobQueued, i%b.computes), ""); err != nil {
				return err
			}
		}
		return nil
	})
	b.running = append(b.running, done...) // the turn gives them queued jobs
}

// cutKey splits an assignment id (workspace/name/attempt).
func cutKey(id string) (ws, name string, ok bool) {
	ws, rest, ok := strings.Cut(id, "/")
	name, _, _ = strings.Cut(rest, "/")
	return ws, name, ok
}

// turn takes a turn and returns the process's CPU time it took (the
// store is in the process; nothing else runs meanwhile).
func (b *turnBench) turn(tb testing.TB) time.Duration {
	c0 := processCPU(tb)
	if _, err := b.c.Step(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return processCPU(tb) - c0
}

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTurn times a controller turn after a round of completions and
// arrivals (TIDE_TURN_BATCH of each; TestScale's rounds) over
// TIDE_TURN_NODES busy nodes in TIDE_TURN_COMPUTES computes and
// TIDE_TURN_JOBS queued jobs (the computes' scale_down_policy
// TIDE_TURN_POLICY, default fixed); BenchmarkIdleTurn a turn after nothing
// changed (a heartbeat tick's).
func BenchmarkTurn(b *testing.B) {
	tb := benchState(b)
	batch := benchSize("TIDE_TURN_BATCH", 100)
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		tb.round(b, batch)
		b.StartTimer()
		cpu += tb.turn(b)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

func BenchmarkIdleTurn(b *testing.B) {
	tb := benchState(b)
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		tb.now = tb.now.Add(10 * time.Millisecond)
		cpu += tb.turn(b)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}
