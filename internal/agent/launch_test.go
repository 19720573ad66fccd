package agent

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
)

func TestPlanLaunch(t *testing.T) {
	twoLocal := []string{"127.0.0.1", "127.0.0.1"}
	tests := []struct {
		name  string
		as    api.Assignment
		root  bool
		procs []launchProc
		files map[string]string
	}{
		{
			name:  "no distribution runs the command once",
			as:    api.Assignment{NodeCount: 2, NodeRank: 1, Nodes: twoLocal},
			procs: []launchProc{{Command: "train"}},
		},
		{
			name: "pytorch, one process per node, node 1",
			as:   api.Assignment{NodeCount: 2, NodeRank: 1, Nodes: []string{"10.0.0.4:7000", "10.0.0.5"}, MasterPort: 29600, Distribution: &api.Distribution{Type: "pytorch"}},
			procs: []launchProc{{Command: "train", Env: map[string]string{
				"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29600", "WORLD_SIZE": "2", "RANK": "1",
				"NODE_RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
			}}},
		},
		{
			name: "pytorch, two processes per node: rank = node_rank*ppn + local_rank",
			as:   api.Assignment{NodeCount: 2, NodeRank: 1, Nodes: twoLocal, MasterPort: 29500, Distribution: &api.Distribution{Type: "pytorch", ProcessCountPerInstance: 2}},
			procs: []launchProc{
				{Command: "train", Label: "[rank 2] ", Env: map[string]string{
					"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "2",
					"NODE_RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
				}},
				{Command: "train", Label: "[rank 3] ", Env: map[string]string{
					"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "3",
					"NODE_RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
				}},
			},
		},
		{
			name: "mpi, node 0 launches every process; local nodes share one hostfile line",
			as:   api.Assignment{NodeCount: 2, NodeRank: 0, Nodes: twoLocal, Distribution: &api.Distribution{Type: "mpi", ProcessCountPerInstance: 2}},
			root: true,
			procs: []launchProc{{
				Command: "exec mpirun --hostfile '/job/.tide/hostfile' -np 4 --oversubscribe /bin/sh -c 'train'",
				Env: map[string]string{
					"TIDE_MPI_HOSTFILE": "/job/.tide/hostfile", "AZ_BATCHAI_MPI_MASTER_NODE": "127.0.0.1",
					"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
				},
			}},
			files: map[string]string{"/job/.tide/hostfile": "localhost slots=4\n"},
		},
		{
			name:  "mpi, other nodes hold their slot",
			as:    api.Assignment{NodeCount: 2, NodeRank: 1, Nodes: twoLocal, Distribution: &api.Distribution{Type: "mpi"}},
			procs: []launchProc{{Command: "exec sleep infinity"}},
		},
		{
			name: "tensorflow, one worker per node by default",
			as:   api.Assignment{NodeCount: 2, NodeRank: 1, Nodes: []string{"a", "b"}, MasterPort: 30000, Distribution: &api.Distribution{Type: "tensorflow"}},
			procs: []launchProc{{Command: "train", Env: map[string]string{
				"TF_CONFIG": `{"cluster":{"worker":["a:30000","b:30001"]},"task":{"index":1,"type":"worker"}}`,
			}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := planLaunch(tt.as, "train", "/job", tt.root)
			if err != nil {
				t.Fatalf("planLaunch: %v", err)
			}
			if !reflect.DeepEqual(l.Procs, tt.procs) {
				t.Errorf("procs:\n got %+v\nwant %+v", l.Procs, tt.procs)
			}
			if !reflect.DeepEqual(l.Files, tt.files) {
				t.Errorf("files = %v, want %v", l.Files, tt.files)
			}
		})
	}
}

func TestPlanLaunchTensorFlowParameterServers(t *testing.T) {
	// 3 workers and 1 ps on 2 nodes: 2 tasks per node; node 1 runs worker 2 and ps 0.
	as := api.Assignment{NodeCount: 2, NodeRank: 1, Nodes: []string{"a", "b"}, MasterPort: 100,
		Distribution: &api.Distribution{Type: "tensorflow", WorkerCount: 3, ParameterServerCount: 1}}
	l, err := planLaunch(as, "train", "/job", false)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, p := range l.Procs {
		var cfg struct {
			Cluster map[string][]string
			Task    struct {
				Type  string
				Index int
			}
		}
		if err := json.Unmarshal([]byte(p.Env["TF_CONFIG"]), &cfg); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(cfg.Cluster["worker"], ","); got != "a:100,a:101,b:102" {
			t.Errorf("workers = %s", got)
		}
		if got := strings.Join(cfg.Cluster["ps"], ","); got != "b:103" {
			t.Errorf("ps = %s", got)
		}
		tasks = append(tasks, p.Label+cfg.Task.Type)
	}
	if got := strings.Join(tasks, ";"); got != "[worker 2] worker;[ps 0] ps" {
		t.Errorf("tasks = %s", got)
	}
}

func TestPlanLaunchUnknownType(t *testing.T) {
	_, err := planLaunch(api.Assignment{Distribution: &api.Distribution{Type: "ray"}}, "x", "/job", false)
	if err == nil || !strings.Contains(err.Error(), "distribution.type") {
		t.Fatalf("err = %v, want a distribution.type error", err)
	}
}

func TestHostEnvironment(t *testing.T) {
	dir := t.TempDir()
	python := filepath.Join(dir, "venv", "bin", "python3.11")
	if err := os.MkdirAll(filepath.Dir(python), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(python, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	shims := filepath.Join(dir, "shims")
	e := &api.Environment{Name: "e", Version: "1", Tide: &api.EnvironmentHost{
		Python: python, Path: []string{"/opt/tools/bin"}, Variables: map[string]string{"OMP_NUM_THREADS": "1"},
	}}
	env := map[string]string{"PATH": "/usr/bin:/bin"}
	if err := hostEnvironment(e, env, shims); err != nil {
		t.Fatalf("hostEnvironment: %v", err)
	}
	want := strings.Join([]string{shims, filepath.Dir(python), "/opt/tools/bin", "/usr/bin:/bin"}, ":")
	if env["PATH"] != want {
		t.Errorf("PATH = %s, want %s", env["PATH"], want)
	}
	if env["OMP_NUM_THREADS"] != "1" {
		t.Errorf("variables not applied: %v", env)
	}
	for _, name := range []string{"python", "python3"} {
		if got, err := os.Readlink(filepath.Join(shims, name)); err != nil || got != python {
			t.Errorf("%s links to %q (%v), want %s", name, got, err, python)
		}
	}

	e.Tide.Python = filepath.Join(dir, "missing")
	err := hostEnvironment(e, map[string]string{}, shims)
	if err == nil || !strings.Contains(err.Error(), "tide.python") {
		t.Errorf("missing interpreter: err = %v, want one naming tide.python", err)
	}
	if err := hostEnvironment(nil, env, shims); err != nil {
		t.Errorf("no environment: %v", err)
	}
}

func TestMPIHostfile(t *testing.T) {
	got := mpiHostfile([]string{"10.0.0.1", "127.0.0.1", "10.0.0.1", "::1"}, 2)
	want := "10.0.0.1 slots=4\nlocalhost slots=4\n"
	if got != want {
		t.Errorf("hostfile = %q, want %q", got, want)
	}
}

// TestGroupFailureStopsTheOthers runs real processes: one rank fails, the
// other (which would run for a minute) is stopped, and the group reports
// the failing rank's exit code.
func TestGroupFailureStopsTheOthers(t *testing.T) {
	var hs []runtime.Handle
	for _, cmd := range []string{"exec sleep 60", "sleep 0.2; exit 3"} {
		h, err := runtime.Process{}.Start(t.Context(), runtime.Spec{Command: cmd, Dir: t.TempDir(), Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	start := time.Now()
	code, err := newGroup(hs, 5*time.Second).Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if code != 3 {
		t.Errorf("exit code = %d, want 3 (the failing rank's)", code)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the group took %s: the sleeping rank was not stopped", d)
	}
}
