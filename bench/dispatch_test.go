package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/store/pgtest"
)

// TestDispatch runs the dispatch and latency sections of TestBench alone,
// on one store (TIDE_BENCH_DISPATCH=sqlite or postgres; skipped when
// unset), and prints one line per section with the agents' CPU beside the
// server's. TIDE_BENCH_BIN runs another tide binary (an older commit's),
// so that two commits can be compared back to back on a busy machine.
func TestDispatch(t *testing.T) {
	which := os.Getenv("TIDE_BENCH_DISPATCH")
	if which == "" {
		t.Skip("set TIDE_BENCH_DISPATCH=sqlite or postgres")
	}
	sz := benchSizes()
	store := ""
	if which == "postgres" {
		store = pgtest.Start(t)
	}
	s := startTide(t, store, "")
	s.compute("warm", "local", Nodes, Nodes)
	var rates []float64
	var cpu, agents time.Duration
	stmts0 := s.scrapeCounter("tide_store_statements_total")
	for range sz.Runs {
		a0 := agentsCPU()
		d := s.tideDispatch("warm", sz.Jobs)
		agents += agentsCPU() - a0
		rates = append(rates, d.Rate)
		cpu += d.CPU
	}
	n := sz.Jobs * sz.Runs
	// Statements per job: the store's, the turns' and this benchmark's
	// polls included.
	stmts := (s.scrapeCounter("tide_store_statements_total") - stmts0) / float64(n)
	fmt.Printf("dispatch %s: %d jobs x %d runs, jobs/s %.1f (median %.1f), CPU s per 1000 jobs: server %s, agents %s, store statements per job %.1f, load %s\n",
		which, sz.Jobs, sz.Runs, rates, median(rates), per1000(cpu, n), per1000(agents, n), stmts, loadAverage())
	s.deleteCompute("warm")
	s.compute("lat", "local", 1, 1)
	lat := s.tideLatency("lat", sz.Latency)
	fmt.Printf("latency %s: %d jobs, submit to first line p50 %s ms, p99 %s ms, max %s ms, load %s\n",
		which, len(lat), ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100)), loadAverage())
}

// TestLatency runs the latency section of TestBench alone (submit to first
// output line on an idle warm node), on one store (TIDE_BENCH_LATENCY=sqlite
// or postgres; skipped when unset), TIDE_BENCH_JOBS jobs (default the
// section's), with TIDE_BENCH_BIN as TestDispatch takes it, so that two
// commits' latencies can be compared in alternated runs.
func TestLatency(t *testing.T) {
	which := os.Getenv("TIDE_BENCH_LATENCY")
	if which == "" {
		t.Skip("set TIDE_BENCH_LATENCY=sqlite or postgres")
	}
	m := benchSizes().Latency
	if v, err := strconv.Atoi(os.Getenv("TIDE_BENCH_JOBS")); err == nil && v > 0 {
		m = v
	}
	store := ""
	if which == "postgres" {
		store = pgtest.Start(t)
	}
	s := startTide(t, store, "")
	s.compute("lat", "local", 1, 1)
	lat := s.tideLatency("lat", m)
	fmt.Printf("latency %s: %d jobs, submit to first line p50 %s ms, p99 %s ms, max %s ms, load %s\n",
		which, len(lat), ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100)), loadAverage())
}

// agentsCPU sums the CPU time of every live agent process of tideBin and
// of the jobs they ran and reaped.
func agentsCPU() time.Duration {
	var ticks int64
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte(tideBin+"\x00agent\x00")) {
			continue
		}
		stat, err := os.ReadFile(strings.TrimSuffix(p, "cmdline") + "stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
	}
	return time.Duration(ticks) * time.Second / clockTick
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
