package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/internal/store/pgtest"
)

// forkExec runs n `true` processes from Nodes goroutines of this process:
// the most jobs per second this machine can start and reap.
func forkExec(t testing.TB, n int) float64 {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	errs := make(chan error, Nodes)
	for range Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := exec.Command("true").Run(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("fork/exec of true: %v", err)
	}
	return float64(n) / time.Since(t0).Seconds()
}

// tideRuns is what one tide server measured.
type tideRuns struct {
	rates []float64
	cpu   time.Duration // over every dispatch run
	jobs  int
	hwmKB int64
}

func dispatchRuns(s *tideServer, sz sizes) tideRuns {
	s.compute("warm", "local", Nodes, Nodes)
	var r tideRuns
	for range sz.Runs {
		d := s.tideDispatch("warm", sz.Jobs)
		r.rates = append(r.rates, d.Rate)
		r.cpu += d.CPU
		r.jobs += sz.Jobs
	}
	r.hwmKB = s.usage().HWMKB
	s.deleteCompute("warm")
	return r
}

func per1000(cpu time.Duration, jobs int) string {
	return strconv.FormatFloat(cpu.Seconds()*1000/float64(jobs), 'f', 2, 64)
}

func mb(kb int64) string { return strconv.FormatFloat(float64(kb)/1024, 'f', 1, 64) }

// TestBench measures tide, Slurm and the machine side by side and prints
// one table per benchmark. It asserts only that every path works: figures
// depend on the machine and are for people to read (make bench).
func TestBench(t *testing.T) {
	sz := benchSizes()
	if testing.Short() && !sz.full {
		t.Skip("the benchmark starts servers, agents and Slurm; run without -short or with make bench")
	}
	host, _ := os.Hostname()
	fmt.Printf("# tide benchmark, %s, host %s, %d CPUs, %s/%s, %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("# %d runs per throughput figure (median shown); %d warm nodes; set TIDE_BENCH=full for the full size\n", sz.Runs, Nodes)

	// 1. The machine's limit.
	var limit []float64
	for range sz.Runs {
		limit = append(limit, forkExec(t, sz.Jobs))
	}

	// tide on SQLite: dispatch, latency, scale from zero.
	sq := startTide(t, "", "")
	sqRuns := dispatchRuns(sq, sz)
	sq.compute("lat", "local", 1, 1)
	tideLat := sq.tideLatency("lat", sz.Latency)
	sq.deleteCompute("lat")
	zero := map[int][]zeroResult{}
	for _, g := range sz.Gangs {
		for r := range sz.Runs {
			zero[g] = append(zero[g], sq.tideFromZero(fmt.Sprintf("zero-g%d-r%d", g, r), g))
		}
	}
	sq.stop()

	// Simulated agents, on a fresh server so that its peak memory is theirs.
	sim := startTide(t, "", "")
	simR := sim.tideSimAgents(sz.Agents, sz.Window)
	sim.stop()

	// PostgreSQL and Slurm run in subtests: each skips alone when it is not
	// installed (and fails under CI).
	var pgRuns tideRuns
	t.Run("postgres", func(t *testing.T) {
		pg := startTide(t, pgtest.Start(t), "")
		pgRuns = dispatchRuns(pg, sz)
		pg.stop()
	})
	var slurmRates []float64
	var slurmLat []time.Duration
	var slurmCPU time.Duration
	var slurmHWM int64
	slurmJobs := 0
	slurmName := "Slurm"
	t.Run("slurm", func(t *testing.T) {
		sl := startSlurm(t, Nodes)
		if v, err := sl.run("sinfo", "--version"); err == nil && len(strings.Fields(string(v))) > 0 {
			f := strings.Fields(string(v)) // "slurm-wlm 22.05.8" on Debian
			slurmName = "Slurm " + f[len(f)-1]
		}
		for range sz.Runs {
			d := sl.slurmDispatch(sz.SlurmJobs)
			slurmRates = append(slurmRates, d.Rate)
			slurmCPU += d.CPU
			slurmJobs += sz.SlurmJobs
		}
		slurmHWM = sl.usage().HWMKB
		slurmLat = sl.slurmLatency(sz.SlurmLatency)
	})

	printTables := func() {
		sqMed := median(sqRuns.rates)
		t1 := &table{title: "1. Dispatch throughput (no-op jobs, first submit to last completion)",
			head: []string{"system", "jobs/run", "runs", "jobs/s (median)", "tide-SQLite / this"}}
		t1.add("tide, SQLite", strconv.Itoa(sz.Jobs), strconv.Itoa(sz.Runs), fmt.Sprintf("%.1f", sqMed), "1.00×")
		if len(pgRuns.rates) > 0 {
			t1.add("tide, PostgreSQL", strconv.Itoa(sz.Jobs), strconv.Itoa(sz.Runs), fmt.Sprintf("%.1f", median(pgRuns.rates)), ratio(sqMed, median(pgRuns.rates)))
		} else {
			t1.add("tide, PostgreSQL", "-", "-", "not run (see above)", "-")
		}
		if len(slurmRates) > 0 {
			t1.add(slurmName, strconv.Itoa(sz.SlurmJobs), strconv.Itoa(sz.Runs), fmt.Sprintf("%.1f", median(slurmRates)), ratio(sqMed, median(slurmRates)))
		} else {
			t1.add(slurmName, "-", "-", "not run (see above)", "-")
		}
		t1.add("fork/exec of true (limit)", strconv.Itoa(sz.Jobs), strconv.Itoa(sz.Runs), fmt.Sprintf("%.1f", median(limit)), ratio(sqMed, median(limit)))
		t1.notes = []string{
			fmt.Sprintf("%d client goroutines submit (tide: REST API; Slurm: sbatch --wrap=true); %d nodes running one job each; fork/exec uses the same parallelism.", Nodes, Nodes),
			"tide's end is the latest job end_time on the server; Slurm's the last \"_job_complete ... done\" in slurmctld's log.",
		}
		t1.write(os.Stdout)

		t2 := &table{title: "2. Submit to first output line on an idle warm node", head: []string{"system", "jobs", "p50 ms", "p99 ms", "max ms"}}
		t2.add("tide, SQLite", strconv.Itoa(len(tideLat)), ms(percentile(tideLat, 50)), ms(percentile(tideLat, 99)), ms(percentile(tideLat, 100)))
		if len(slurmLat) > 0 {
			t2.add(slurmName, strconv.Itoa(len(slurmLat)), ms(percentile(slurmLat, 50)), ms(percentile(slurmLat, 99)), ms(percentile(slurmLat, 100)))
		}
		t2.notes = []string{"tide: CreateJob, then the job's log stream (SSE) until its first line; Slurm: sbatch, then the output file polled every 1 ms until it holds a line."}
		t2.write(os.Stdout)

		t3 := &table{title: "3. Scale from zero (local provider)", head: []string{"gang", "runs", "submit→running ms", "node start ms", "overhead ms (median)"}}
		for _, g := range sz.Gangs {
			var s2r, ns, ov []float64
			for _, z := range zero[g] {
				s2r = append(s2r, float64(z.SubmitToRunning.Microseconds())/1000)
				ns = append(ns, float64(z.NodeStart.Microseconds())/1000)
				ov = append(ov, float64((z.SubmitToRunning-z.NodeStart).Microseconds())/1000)
			}
			t3.add(strconv.Itoa(g), strconv.Itoa(len(zero[g])), fmt.Sprintf("%.0f", median(s2r)), fmt.Sprintf("%.0f", median(ns)), fmt.Sprintf("%.0f", median(ov)))
		}
		t3.notes = []string{"submit→running: client submit to the job's start_time; node start: the slowest node's agent, from process start (node.json created) to its \"registered\" log line; overhead = the difference."}
		t3.write(os.Stdout)

		t4 := &table{title: "4. Control-plane cost", head: []string{"process", "load", "CPU s per 1000 jobs", "CPU %", "peak RSS MB"}}
		t4.add("tide server, SQLite", fmt.Sprintf("%d jobs", sqRuns.jobs), per1000(sqRuns.cpu, sqRuns.jobs), "-", mb(sqRuns.hwmKB))
		if pgRuns.jobs > 0 {
			t4.add("tide server, PostgreSQL", fmt.Sprintf("%d jobs", pgRuns.jobs), per1000(pgRuns.cpu, pgRuns.jobs), "-", mb(pgRuns.hwmKB))
		}
		if slurmJobs > 0 {
			t4.add("slurmctld", fmt.Sprintf("%d jobs", slurmJobs), per1000(slurmCPU, slurmJobs), "-", mb(slurmHWM))
		}
		t4.add("tide server, SQLite", fmt.Sprintf("%d agents, %d heartbeats in %s", simR.Agents, simR.Heartbeats, simR.Window), "-",
			fmt.Sprintf("%.1f", 100*simR.CPU.Seconds()/simR.Window.Seconds()), mb(simR.HWMKB))
		t4.notes = []string{"CPU: utime+stime of the server process from /proc/PID/stat (agents and PostgreSQL excluded); peak RSS: VmHWM since the process started.",
			"Simulated agents are goroutines of the benchmark speaking the agent protocol (register, stream, heartbeat) with the tokens the server issued."}
		t4.write(os.Stdout)
	}
	printTables()
}
