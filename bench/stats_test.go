package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// sizes are how much work each benchmark does. The short form (the default,
// which `make test` runs) only proves that every path works; the full form
// (TIDE_BENCH=full, `make bench`) is what the README quotes.
type sizes struct {
	full bool
	// Runs is how many times each throughput run repeats; tables show medians.
	Runs int
	// Jobs is the number of no-op jobs per dispatch run on tide and fork/exec.
	Jobs int
	// SlurmJobs is the same for Slurm, which starts about one job per node
	// per second, so its runs are smaller to keep `make bench` at minutes.
	SlurmJobs int
	// Latency is the number of jobs submitted one at a time; SlurmLatency
	// likewise for Slurm.
	Latency, SlurmLatency int
	// Gangs are the gang sizes of the scale-from-zero benchmark.
	Gangs []int
	// Agents simulated for Window in the control-plane benchmark.
	Agents int
	Window time.Duration
}

// Nodes is the number of warm nodes (and fork/exec parallelism).
const Nodes = 8

func benchSizes() sizes {
	s := sizes{Runs: 1, Jobs: 100, SlurmJobs: 40, Latency: 20, SlurmLatency: 5, Gangs: []int{1, 4, 8}, Agents: 200, Window: 5 * time.Second}
	if os.Getenv("TIDE_BENCH") == "full" {
		s = sizes{full: true, Runs: 3, Jobs: 2000, SlurmJobs: 400, Latency: 500, SlurmLatency: 60, Gangs: []int{1, 4, 8}, Agents: 200, Window: 30 * time.Second}
	}
	if v, err := strconv.Atoi(os.Getenv("TIDE_BENCH_JOBS")); err == nil && v > 0 {
		s.Jobs = v
	}
	if v, err := strconv.Atoi(os.Getenv("TIDE_BENCH_RUNS")); err == nil && v > 0 {
		s.Runs = v
	}
	return s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// table is one printed result table.
type table struct {
	title string
	head  []string
	rows  [][]string
	notes []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n## %s\n\n", t.title)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.head, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
	for _, n := range t.notes {
		fmt.Fprintf(&b, "  * %s\n", n)
	}
	_, _ = w.Write(b.Bytes())
}

// procUsage is what /proc says about one process.
type procUsage struct {
	CPU   time.Duration // user + system time so far
	HWMKB int64         // peak resident set size (VmHWM)
}

// clockTick is USER_HZ, 100 on every Linux architecture Go supports.
const clockTick = 100

func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("reading process %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("process %d: short /proc stat", pid)
	}
	// Fields 14 and 15 of stat (utime, stime) are [11] and [12] after the name.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(ut+st) * time.Second / clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("reading process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			u.HWMKB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return u, nil
}

// poll calls cond every interval until it returns true or d passes.
func poll(t testing.TB, what string, d, interval time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(interval)
	}
}
