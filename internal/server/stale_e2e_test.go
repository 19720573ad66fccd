package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// TestStaleAssignmentIsStopped makes the store and a real agent disagree:
// the store ends job A (a final status the agent never sent, as a lost
// cancel or a second copy of the agent would leave it) while the agent
// still runs A. The node is idle in the store, so job B is assigned to it:
// the agent must refuse B while A runs, the heartbeat must stop A (the
// store does not place it there), and B must then run, never beside A.
func TestStaleAssignmentIsStopped(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	// Jobs may run as another user: the folder they write to is open.
	dir, err := os.MkdirTemp("", "tide-stale-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "a.pid")
	a := submit(t, in, "command: echo $$ > "+pidFile+"; exec sleep 300\ncompute: one-node\n")
	var node string
	waitFor(t, "job A running", 30*time.Second, func() bool {
		j, err := in.client.Job(ctx, "default", a.Name)
		if err != nil || j.Status != api.JobRunning || len(j.Ranks) != 1 {
			return false
		}
		node = j.Ranks[0].Node
		_, err = os.Stat(pidFile)
		return err == nil
	})
	b, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)

	zero := 0
	id := service.AssignmentID("default", a.Name, 1)
	st, _ := json.Marshal(api.AssignmentStatus{ID: id, Status: api.JobCompleted, ExitCode: &zero})
	if rec := call(in.srv.Handler(), in.srv.NodeToken(node), "POST", "/v1/agent/assignments/"+url.PathEscape(id)+"/status", st); rec.Code/100 != 2 {
		t.Fatalf("posting A's final status as its node: %d %s", rec.Code, rec.Body)
	}
	if j := waitJob(t, in, a.Name, 10*time.Second); j.Status != api.JobCompleted {
		t.Fatalf("job A: %s; want Completed (the store's view)", j.Status)
	}

	overlap := filepath.Join(dir, "overlap")
	bj := submit(t, in, "command: kill -0 "+strconv.Itoa(pid)+" 2>/dev/null && touch "+overlap+"; echo b\ncompute: one-node\n")
	j := waitJob(t, in, bj.Name, 60*time.Second)
	if j.Status != api.JobCompleted || len(j.Ranks) != 1 || j.Ranks[0].Node != node {
		t.Errorf("job B: %s %q on %+v; want Completed on node %s", j.Status, j.Error, j.Ranks, node)
	}
	if _, err := os.Stat(overlap); err == nil {
		t.Error("job B started while the node's agent still ran job A")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("job A's process %d still runs after B ended (kill -0: %v); the store does not place A on its node", pid, err)
	}
	evs, err := in.client.JobEvents(ctx, "default", bj.Name)
	if err != nil {
		t.Fatal(err)
	}
	refused := false
	for _, e := range evs {
		refused = refused || e.Kind == "AssignmentRefused"
	}
	if !refused {
		t.Errorf("job B's events %+v; want an AssignmentRefused event", evs)
	}
}
