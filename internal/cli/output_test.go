package cli

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

var now = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testPrinter(format string, w *bytes.Buffer) *printer {
	return &printer{format: format, w: w, now: now, loc: time.UTC}
}

func sampleCompute() *api.Compute {
	return &api.Compute{
		Name: "cpu-cluster", Type: "amlcompute", Location: "local", Size: "Standard_DS3_v2", Tier: "dedicated",
		MinInstances: 0, MaxInstances: 4, IdleTimeBeforeScaleDown: 120,
		Workspace: "default", ProvisioningState: "Succeeded", AllocationState: "Resizing",
		CurrentNodeCount: 1, TargetNodeCount: 2,
		NodeStateCounts: api.NodeStateCounts{Running: 1},
		CreatedOn:       now.Add(-90 * time.Second),
	}
}

func TestPrint(t *testing.T) {
	c := sampleCompute()
	tests := []struct {
		name, format string
		v            any
		table        func(p *printer, w *bytes.Buffer)
		want         string
	}{
		{
			name: "compute list table", format: "table", v: []api.Compute{*c},
			table: func(p *printer, w *bytes.Buffer) { computeTable(w, []api.Compute{*c}) },
			want: "NAME         TYPE        SIZE             TIER       LOCATION  MIN  MAX  NODES  PROVISIONING  ALLOCATION\n" +
				"cpu-cluster  amlcompute  Standard_DS3_v2  dedicated  local     0    4    1/2    Succeeded     Resizing\n",
		},
		{
			name: "compute show table", format: "table", v: c,
			table: func(p *printer, w *bytes.Buffer) { p.computeDetails(w, c) },
			want: `name:                        cpu-cluster
type:                        amlcompute
workspace:                   default
location:                    local
size:                        Standard_DS3_v2
tier:                        dedicated
min_instances:               0
max_instances:               4
idle_time_before_scale_down: 120s
provisioning_state:          Succeeded
allocation_state:            Resizing
current_node_count:          1
target_node_count:           2
node_state_counts:           idle=0 running=1 preparing=0 unusable=0 leaving=0 preempted=0
created_on:                  2025-01-02 03:02:35 (1m30s ago)
`,
		},
		{
			name: "empty list as json", format: "json", v: []api.Compute(nil),
			want: "[]\n",
		},
		{
			name: "list as json array", format: "json", v: []api.Location{{Name: "local", Provider: "local", Default: true}},
			want: "[\n  {\n    \"name\": \"local\",\n    \"provider\": \"local\",\n    \"default\": true\n  }\n]\n",
		},
		{
			name: "yaml keeps API names and order", format: "yaml", v: api.Usage{Location: "local", Family: "standardDSv2Family", Tier: "dedicated", CurrentValue: 8, Limit: 100, Unit: "Count"},
			want: "location: local\nfamily: standardDSv2Family\ntier: dedicated\ncurrent_value: 8\nlimit: 100\nunit: Count\n",
		},
		{
			name: "yaml quotes what needs it", format: "yaml", v: map[string]string{"a": "yes", "b": "1", "c": "x: y"},
			want: "a: yes\nb: \"1\"\nc: 'x: y'\n",
		},
		{
			name: "nodes", format: "table", v: nil,
			table: func(p *printer, w *bytes.Buffer) {
				p.nodeTable(w, []api.Node{{ID: "cpu-cluster-1", State: "running", Job: "j1", CreatedOn: now.Add(-3 * time.Hour), StateSince: now.Add(-5 * time.Second)},
					{ID: "cpu-cluster-2", State: "idle", CreatedOn: now.Add(-3 * time.Hour), StateSince: now.Add(-5 * time.Second), Cache: &api.NodeCache{Hits: 3, Misses: 1, Bytes: 3 << 20}}})
			},
			want: "NODE           STATE    JOB  AGE  IN_STATE  CPU  MEMORY  CACHE        ERROR\ncpu-cluster-1  running  j1   3h   5s        -    -       -            -\ncpu-cluster-2  idle     -    3h   5s        -    -       3.0 MiB 3/4  -\n",
		},
		{
			name: "usage", format: "table", v: nil,
			table: func(p *printer, w *bytes.Buffer) {
				usageTable(w, []api.Usage{{Location: "local", Family: "standardDSv2Family", Tier: "dedicated", CurrentValue: 8, Limit: 100, Unit: "Count"}})
			},
			want: "LOCATION  FAMILY              TIER       CURRENT  LIMIT  UNIT\nlocal     standardDSv2Family  dedicated  8        100    Count\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := testPrinter(tt.format, &buf)
			if err := p.print(tt.v, func(io.Writer) { tt.table(p, &buf) }); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestJobDetails(t *testing.T) {
	three := 3
	tests := []struct {
		name string
		job  api.Job
		want []string
		not  []string
	}{
		{
			name: "failed shows exit code, error and log tail",
			job: api.Job{Name: "j1", Status: api.JobFailed, Compute: "cpu", Command: "python train.py\n--x 1",
				CreatedOn: now.Add(-time.Minute), StartTime: now.Add(-50 * time.Second), EndTime: now.Add(-10 * time.Second),
				ExitCode: &three, Error: "exit code 3", LogTail: []string{"Traceback", "ValueError: boom"}},
			want: []string{`status: +Failed`, `duration: +40s`, `exit_code: +3`, `error: +exit code 3`,
				`command: +python train.py \.\.\.`, `log tail:\n  Traceback\n  ValueError: boom\n`},
			not: []string{"pending_reason"},
		},
		{
			name: "queued shows why and for how long",
			job: api.Job{Name: "j2", Status: api.JobQueued, Compute: "cpu", Command: "echo hi",
				CreatedOn: now.Add(-12 * time.Second), PendingReason: "waiting for 1 node to start on cpu"},
			want: []string{`pending_reason: +waiting for 1 node to start on cpu \(12s\)`},
			not:  []string{"duration", "log tail", "exit_code"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			testPrinter("table", &buf).jobDetails(&buf, &tt.job)
			got := buf.String()
			for _, w := range tt.want {
				if !regexp.MustCompile(w).MatchString(got) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("unexpected %q in:\n%s", n, got)
				}
			}
		})
	}
}

func TestAge(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {0, "0s"}, {59 * time.Second, "59s"}, {90 * time.Second, "1m30s"},
		{5 * time.Minute, "5m"}, {42 * time.Minute, "42m"}, {2*time.Hour + 5*time.Minute, "2h5m"},
		{3 * time.Hour, "3h"}, {50 * time.Hour, "2d"},
	}
	for _, tt := range tests {
		if got := age(tt.d); got != tt.want {
			t.Errorf("age(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestPlanDownload(t *testing.T) {
	arts := []api.Artifact{
		{Path: "logs/rank0.txt", Size: 10},
		{Path: "outputs/model/weights.bin", Size: 100},
		{Path: "outputs/metrics.json", Size: 5},
		{Path: "outputs/report/a/b.txt", Size: 1},
	}
	dests := func(p []download) string {
		var s []string
		for _, d := range p {
			s = append(s, d.dest)
		}
		return strings.Join(s, " ")
	}
	tests := []struct {
		name       string
		named      []string
		outputName string
		all        bool
		want       string
		err        string
	}{
		{name: "default skips named outputs", named: []string{"model", "report"},
			want: "artifacts/logs/rank0.txt artifacts/outputs/metrics.json"},
		{name: "one named output", named: []string{"model", "report"}, outputName: "report",
			want: "named-outputs/report/a/b.txt"},
		{name: "all", named: []string{"model", "report"}, all: true,
			want: "artifacts/logs/rank0.txt artifacts/outputs/metrics.json named-outputs/model/weights.bin named-outputs/report/a/b.txt"},
		{name: "no named outputs", want: "artifacts/logs/rank0.txt artifacts/outputs/metrics.json artifacts/outputs/model/weights.bin artifacts/outputs/report/a/b.txt"},
		{name: "default is the default artifacts", named: []string{"model", "report"}, outputName: "default",
			want: "artifacts/logs/rank0.txt artifacts/outputs/metrics.json"},
		{name: "unknown output", named: []string{"model"}, outputName: "nope", err: "not an output of the job; its outputs are model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := planDownload(arts, tt.named, tt.outputName, tt.all)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := dests(p); got != tt.want {
				t.Errorf("dests = %s\nwant    %s", got, tt.want)
			}
		})
	}
	if _, err := planDownload([]api.Artifact{{Path: "../../etc/passwd"}}, nil, "", false); err == nil {
		t.Error("a path escaping the download folder was accepted")
	}
}

func TestStreamView(t *testing.T) {
	clock := now
	var out, errb bytes.Buffer
	v := &streamView{stdout: &out, stderr: &errb, now: func() time.Time { return clock }, job: "j1"}
	two := api.JobResources{InstanceCount: 2}
	events := []api.LogEvent{
		{Type: api.LogEventStatus, Job: &api.Job{Name: "j1", Status: api.JobQueued, CreatedOn: now.Add(-12 * time.Second), PendingReason: "waiting for 1 node to start on cpu-cluster"}},
		{Type: api.LogEventStatus, Job: &api.Job{Name: "j1", Status: api.JobQueued, CreatedOn: now.Add(-12 * time.Second), PendingReason: "waiting for 1 node to start on cpu-cluster"}},
		{Type: api.LogEventStatus, Job: &api.Job{Name: "j1", Status: api.JobRunning, Resources: &two}},
		{Type: api.LogEventLine, Line: api.LogLine{Seq: 1, Node: 0, Text: "hello"}},
		{Type: api.LogEventLine, Line: api.LogLine{Seq: 2, Node: 1, Text: "world"}},
		{Type: api.LogEventStatus, Job: &api.Job{Name: "j1", Status: api.JobCompleted, Resources: &two}},
	}
	for _, ev := range events {
		if err := v.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := out.String(), "[node-0] hello\n[node-1] world\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := errb.String(), "Queued 12s: waiting for 1 node to start on cpu-cluster\nStatus: Running\nStatus: Completed\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	one := 1
	start := now.Add(-time.Minute)
	tests := []struct {
		job  api.Job
		want string
	}{
		{api.Job{Name: "j", Status: api.JobCompleted, StartTime: start, EndTime: now}, "Job j completed in 1m."},
		{api.Job{Name: "j", Status: api.JobFailed, StartTime: start, EndTime: now, ExitCode: &one}, "Job j failed after 1m: exit code 1."},
		{api.Job{Name: "j", Status: api.JobFailed, StartTime: start, EndTime: now, ExitCode: &one, Error: "timeout: ran longer than limits.timeout 5s"}, "Job j failed after 1m: timeout: ran longer than limits.timeout 5s."},
		{api.Job{Name: "j", Status: api.JobCanceled, CreatedOn: start, EndTime: now}, "Job j canceled after 1m."},
	}
	for _, tt := range tests {
		if got := summary(&tt.job); got != tt.want {
			t.Errorf("summary = %q, want %q", got, tt.want)
		}
	}
}
