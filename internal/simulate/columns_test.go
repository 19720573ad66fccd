package simulate

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/catalog"
)

// readFile reads a trace from testdata, by its header or through cols.
func readFile(t *testing.T, name string, cols *Columns) *Trace {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tr *Trace
	if cols != nil {
		tr, err = ReadTraceColumns(name, f, *cols, "columns")
	} else {
		tr, err = ReadTrace(name, f)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// fitNodes fits tr to a compute of size and returns each job's nodes.
func fitNodes(t *testing.T, tr *Trace, size string) []int {
	t.Helper()
	c := compute(t, "max_instances: 100\n")
	c.Size = size
	if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
		t.Fatal(err)
	}
	var n []int
	for _, j := range tr.Jobs {
		n = append(n, j.Instances)
	}
	return n
}

// TestReadAlibaba reads a file in the format of Alibaba's
// cluster-trace-gpu-v2023 (openb_pod_list_*.csv): pods never scheduled are
// skipped and counted, a pod runs from scheduled_time to deletion_time, and
// it gets the nodes that hold its GPUs, vCPUs and memory.
func TestReadAlibaba(t *testing.T) {
	tr := readFile(t, "openb_pod_list_small.csv", nil)
	if tr.Format != "alibaba" || tr.Skipped != 2 || len(tr.Jobs) != 5 {
		t.Fatalf("format %s, skipped %d, jobs %d: want alibaba, 2 skipped (never scheduled), 5 jobs", tr.Format, tr.Skipped, len(tr.Jobs))
	}
	want := []Job{
		{Submit: 0, Duration: 3600 * time.Second, GPUs: 8, CPUs: 88, MemoryGB: 320, Line: 2},
		{Submit: 200 * time.Second, Duration: 290 * time.Second, GPUs: 1, CPUs: 4, MemoryGB: 15258.0 / 1024, Line: 3},
		{Submit: 400 * time.Second, Duration: 600 * time.Second, GPUs: 1, CPUs: 8, MemoryGB: 30517.0 / 1024, Line: 5}, // CPU-only: one node
		{Submit: 500 * time.Second, Duration: 395 * time.Second, GPUs: 1, CPUs: 16, MemoryGB: 32, Line: 6},
		{Submit: 600 * time.Second, Duration: 100 * time.Second, GPUs: 1, CPUs: 3.152, MemoryGB: 5600.0 / 1024, Line: 7}, // failed pods ran too
	}
	for i, w := range want {
		if g := tr.Jobs[i]; g.Submit != w.Submit || g.Duration != w.Duration || g.GPUs != w.GPUs || !near(g.CPUs, w.CPUs) || !near(g.MemoryGB, w.MemoryGB) || g.Line != w.Line {
			t.Errorf("job %d = %+v, want %+v", i, g, w)
		}
	}
	// A T4 node has 1 GPU, 4 vCPUs and 28 GB: the 8-GPU pod's 88 vCPUs
	// need 22 nodes, the CPU-only pod's 8 vCPUs and 29.8 GB two.
	if got, want := fitNodes(t, tr, "Standard_NC4as_T4_v3"), []int{22, 1, 2, 4, 1}; !slices.Equal(got, want) {
		t.Errorf("nodes on Standard_NC4as_T4_v3 = %v, want %v", got, want)
	}
	// On Alibaba-like 8-GPU, 96-vCPU nodes every pod fits one.
	if got, want := fitNodes(t, tr, "Standard_ND96asr_v4"), []int{1, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("nodes on Standard_ND96asr_v4 = %v, want %v", got, want)
	}
}

func TestReadTraceColumns(t *testing.T) {
	cols, err := ParseColumns("submit=queued_at, end=finished_at, start=started_at, gpus=gpu_count, cpus=vcpus, memory_gb=mem_gb")
	if err != nil {
		t.Fatal(err)
	}
	tr := readFile(t, "runs.csv", &cols)
	if len(tr.Jobs) != 2 || tr.Skipped != 1 {
		t.Fatalf("jobs %d, skipped %d: want 2 and 1 (the quoted row never started)", len(tr.Jobs), tr.Skipped)
	}
	if !tr.Start.Equal(time.Date(2024, 5, 1, 9, 59, 0, 0, time.UTC)) || tr.Jobs[1].Submit != time.Minute || tr.Jobs[1].Duration != time.Hour ||
		tr.Jobs[1].GPUs != 2 || tr.Jobs[1].CPUs != 8 || tr.Jobs[1].MemoryGB != 64 {
		t.Errorf("start %v, jobs %+v", tr.Start, tr.Jobs)
	}
	// 64 GB on 28 GB nodes: three, more than its two GPUs need.
	if got, want := fitNodes(t, tr, "Standard_NC4as_T4_v3"), []int{1, 3}; !slices.Equal(got, want) {
		t.Errorf("nodes = %v, want %v", got, want)
	}
	text := "job,queued_at,started_at,finished_at\n"
	for _, bad := range []struct{ cols, want string }{
		{"duration=x", "submit=COLUMN is required"},
		{"submit=a", "duration=COLUMN, or end=COLUMN"},
		{"submit=a,duration=b,end=c", "not both"},
		{"submit=a,duration=b,colour=red", "unknown key colour"},
		{"submit=a,duration=b,cpus=", "want key=column"},
		{"submit", "want key=column"},
	} {
		if _, err := ParseColumns(bad.cols); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseColumns(%q) = %v, want an error with %q", bad.cols, err, bad.want)
		}
	}
	cols, _ = ParseColumns("submit=queued_at,duration=runtime")
	if _, err := ReadTraceColumns("mine.csv", strings.NewReader(text), cols, "columns"); err == nil || !strings.Contains(err.Error(), "duration=runtime: no such column") {
		t.Errorf("missing column: %v", err)
	}
	cols, _ = ParseColumns("submit=queued_at,end=finished_at,start=started_at")
	if _, err := ReadTraceColumns("mine.csv", strings.NewReader("queued_at,started_at,finished_at\n10,20,15\n"), cols, "columns"); err == nil || !strings.Contains(err.Error(), "mine.csv:2: end") {
		t.Errorf("end before start: %v", err)
	}
}

// FuzzReadTraceColumns: any --columns value and any CSV either fail with an
// error naming the file, or give a trace that replays.
func FuzzReadTraceColumns(f *testing.F) {
	f.Add("submit=q,start=s,end=e,gpus=g,cpus=c,memory_gb=m", "q,s,e,g,c,m\n0,5,65,2,8,64\n10,,,1,,\n")
	f.Add("submit=q,duration=d,instances=n,size=z", "q,d,n,z\n2024-05-01T10:00:00Z,60,2,\n2024-05-01T10:01:00Z,1e9,1,x\n")
	f.Add("submit=q,end=e", "q,e\n\"0\",\"1\"\n5,\"3\n")
	f.Fuzz(func(t *testing.T, spec, text string) {
		cols, err := ParseColumns(spec)
		if err != nil {
			return
		}
		tr, err := ReadTraceColumns("f.csv", strings.NewReader(text), cols, "columns")
		replayFuzzed(t, tr, err)
	})
}
