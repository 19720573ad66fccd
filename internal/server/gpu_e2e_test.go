package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// TestNodesGetDisjointGPUs: two nodes of a 2-GPU size on a host configured
// with GPUs 0-3 (no driver is needed: the list is the location's) each give
// their job two devices, and never the same ones, on the process runtime
// and, where bubblewrap is installed, the sandbox runtime.
func TestNodesGetDisjointGPUs(t *testing.T) {
	runtimes := []string{"process"}
	if _, err := exec.LookPath("bwrap"); err == nil {
		runtimes = append(runtimes, "sandbox")
	} else if os.Getenv("CI") != "" {
		t.Fatal("bwrap not installed; .ci/run installs bubblewrap")
	}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			dir := t.TempDir()
			in := startWith(t, dir, "", "", func(c *config.Server) {
				c.Locations = append(c.Locations, config.Location{Name: "gpuhost", Provider: "local", Runtime: rt, Oversubscribe: true,
					Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "grace_period": "5s", "gpus": []any{0, 1, 2, 3},
						"data_dir": filepath.Join(dir, "gpuhost")}})
			})
			t.Cleanup(func() { cleanup(t, in) })
			createCompute(t, in, "name: v100\ntype: amlcompute\nsize: Standard_NC12s_v3\nlocation: gpuhost\nmax_instances: 2\n")
			// Two jobs at once on a cluster of at most two nodes: one node
			// each, both alive together (the sandbox sees only its job's
			// folder, so the jobs just run long enough to overlap).
			var jobs []*api.Job
			for range 2 {
				jobs = append(jobs, submit(t, in, "command: echo \"devices=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES\"; sleep 3\ncompute: v100\n"))
			}
			ctx := context.Background()
			seen := map[string]string{}
			waitFor(t, "both jobs to print their devices", 90*time.Second, func() bool {
				for _, j := range jobs {
					lines, err := in.client.Logs(ctx, "default", j.Name, 0)
					if err != nil {
						return false
					}
					for _, l := range lines {
						if d, ok := strings.CutPrefix(l.Text, "devices="); ok {
							seen[j.Name] = d
						}
					}
				}
				return len(seen) == 2
			})
			var all []string
			for name, line := range seen {
				devs, nvidia, _ := strings.Cut(line, " nvidia=")
				ids := strings.Split(devs, ",")
				if len(ids) != 2 || nvidia != devs {
					t.Errorf("job %s saw %q: want two devices, the same in CUDA_ and NVIDIA_VISIBLE_DEVICES", name, line)
				}
				for _, id := range ids {
					if slices.Contains(all, id) {
						t.Errorf("device %s given to two nodes at once: %v", id, seen)
					}
					all = append(all, id)
				}
			}
			ns, err := in.client.Nodes(ctx, "default", "v100")
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range ns {
				if len(n.GPUDevices) != 2 {
					t.Errorf("node %s: gpu_devices %v, want its 2", n.ID, n.GPUDevices)
				}
			}
			for _, j := range jobs {
				if got := waitJob(t, in, j.Name, 60*time.Second); got.Status != api.JobCompleted {
					t.Errorf("job %s: %s (%s)", j.Name, got.Status, got.Error)
				}
			}
		})
	}
}
