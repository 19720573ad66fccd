package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider/ssh/sshlab"
	"github.com/tideml/tide/internal/tidetest"
)

// gangJob runs on 2 nodes. Each rank holds a lock on its (job, rank)
// while it works, so that a second copy of it running at the same time
// (a retry while a partitioned attempt still runs) is written to the
// file as "concurrent"; each rank writes "start" and "end" lines with its
// attempt.
const gangJob = `name: %[1]s
compute: lab
resources: {instance_count: 2}
command: >-
  flock -n %[2]s.$TIDE_JOB_NAME.$TIDE_NODE_RANK.lock sh -c
  'echo "start $TIDE_JOB_NAME $TIDE_NODE_RANK $TIDE_ATTEMPT" >> %[2]s; sleep %[3]d;
  echo "end $TIDE_JOB_NAME $TIDE_NODE_RANK $TIDE_ATTEMPT" >> %[2]s'
  || echo "concurrent $TIDE_JOB_NAME $TIDE_NODE_RANK $TIDE_ATTEMPT" >> %[2]s
`

// TestPartition runs gang jobs of 2 nodes on hosts in network namespaces
// (sshlab, the ssh provider) and cuts the host of a rank off the network
// mid-gang (its veth down), then heals it: (b) before unusable_after, and
// (a) after it, once the job was retried elsewhere. Each job's outcome is
// decided once (one terminal event, Completed) and is there after the
// heal; no rank of a job ever runs twice at the same time; each rank ends
// its work once; the healed-early job was not retried and its cut rank's
// lines reached the log.
func TestPartition(t *testing.T) {
	if miss := sshlab.Missing(); miss != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("ssh lab: %s", miss)
		}
		t.Skipf("ssh lab: %s", miss)
	}
	if testing.Short() {
		t.Skip("starts a tide server, sshd hosts, agents and jobs")
	}
	lab, err := sshlab.New(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	unusable := 6 * time.Second
	var hosts strings.Builder
	for _, h := range lab.Hosts {
		fmt.Fprintf(&hosts, "        - {address: %s, port: 22, user: root, key_file: %q, host_key: %q, capacity: 1, dir: %q}\n",
			h.IP, lab.ClientKey, h.HostKey, filepath.Join(lab.Dir, "remote", h.NS))
	}
	// The server listens on host 2's root end: the namespaces reach it
	// through their default route; host 2 is never cut.
	port := freeAddr(t)[len("127.0.0.1:"):]
	s := newServer(t, options{addr: lab.Hosts[2].RootIP + ":" + port, unusableAfter: unusable, locations: fmt.Sprintf(`  - name: lab
    provider: ssh
    settings:
      binary: %q
      grace_period: 3s
      timeout: 6s
      hosts:
%s`, tideBin, hosts.String())})
	effectsFile := tidetest.JobWritable(t, filepath.Join(tidetest.SharedDir(t), "effects"))
	s.createCompute("name: lab\ntype: amlcompute\nsize: Standard_DS1_v2\nlocation: lab\nmin_instances: 3\nmax_instances: 3\nidle_time_before_scale_down: 600\n")
	ctx := context.Background()
	start := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range []string{"healed-early", "healed-late"} {
			if j, err := s.client.Job(ctx, "default", n); err == nil {
				t.Logf("job %s: %s attempt %d, pending %q, error %q", n, j.Status, j.Attempt, j.PendingReason, j.Error)
			}
			es, _ := s.client.JobEvents(ctx, "default", n)
			for _, e := range es {
				t.Logf("  %s %s %s", e.Time.Format("15:04:05.000"), e.Kind, e.Message)
			}
		}
		nodes, _ := s.client.Nodes(ctx, "default", "lab")
		for _, n := range nodes {
			t.Logf("node %s: %s job %q error %q", n.ID, n.State, n.Job, n.Error)
		}
		logs, _ := filepath.Glob(filepath.Join(lab.Dir, "remote", "*", "nodes", "*", "agent.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, tail(string(b), 30))
		}
	})

	// cut runs job name, cuts host 0 once both ranks started, and heals
	// it when healed says so.
	cutRank := map[string]int{} // the rank whose host was cut, by job
	cut := func(name string, sleep int, healed func(cutAt time.Time) bool) {
		t.Helper()
		s.submit(fmt.Sprintf(gangJob, name, effectsFile, sleep))
		waitFor(t, name+" to start on both nodes", 90*time.Second, func() bool {
			return effectLines(t, effectsFile, "start "+name+" ") == 2
		})
		// Cut the host of one of its ranks, not host 2 (the server's).
		host := -1
		j, err := s.client.Job(ctx, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		for rank, r := range j.Ranks {
			for i, h := range lab.Hosts[:2] {
				if _, err := os.Stat(filepath.Join(lab.Dir, "remote", h.NS, "nodes", r.Node)); err == nil {
					host, cutRank[name] = i, rank
				}
			}
		}
		if host < 0 {
			t.Fatalf("%s runs on no host but the server's: %+v", name, j.Ranks)
		}
		if err := lab.Cut(host, true); err != nil {
			t.Fatal(err)
		}
		cutAt := time.Now()
		waitFor(t, "the time to heal "+name, 120*time.Second, func() bool { return healed(cutAt) })
		if err := lab.Cut(host, false); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: host %d cut for %s", name, host, time.Since(cutAt).Round(100*time.Millisecond))
	}

	// (b) Healed well before unusable_after (and before the agent's fence
	// at half of it): the job goes on, and is not retried.
	cut("healed-early", 3, func(cutAt time.Time) bool { return time.Since(cutAt) > unusable/4 })
	// (a) Healed after it: the cut node is unusable, the job's other
	// rank is stopped, the job is retried on the two other nodes (three
	// wait: min_instances 3), and the heal comes once the retry runs.
	cut("healed-late", 12, func(time.Time) bool {
		j, err := s.client.Job(ctx, "default", "healed-late")
		return err == nil && j.Attempt > 1 && (j.Status == api.JobRunning || api.JobTerminal(j.Status))
	})

	names := []string{"healed-early", "healed-late"}
	deadline := time.Now().Add(180 * time.Second)
	for _, n := range names {
		s.ended(n, deadline)
	}
	// Had the cut rank of the late job gone on running, it would have
	// written its end by now: it started before the retry, which has
	// the same work and ended.
	took := time.Since(start)
	lost, dup := 0, 0
	for _, n := range names {
		j := s.ended(n, deadline)
		if j == nil || j.Status != api.JobCompleted {
			t.Errorf("job %s: %+v, want Completed", n, j)
			lost++
			continue
		}
		if !s.endedOnce(n) {
			dup++
		}
		if c := effectLines(t, effectsFile, "concurrent "+n+" "); c > 0 {
			t.Errorf("job %s: a rank ran twice at the same time (%d times)", n, c)
			dup++
		}
		// Each rank's work ended once in the last attempt, and at most
		// once in each attempt: the other rank of a cut gang may have
		// finished before the cut was noticed; the whole gang runs again.
		for rank := range 2 {
			if c := effectLines(t, effectsFile, fmt.Sprintf("end %s %d %d", n, rank, j.Attempt)); c != 1 {
				t.Errorf("job %s rank %d ended its work %d times in its last attempt, want once", n, rank, c)
				lost++
			}
			if c := effectLines(t, effectsFile, fmt.Sprintf("end %s %d ", n, rank)); c > j.Attempt {
				t.Errorf("job %s rank %d ended its work %d times in %d attempts", n, rank, c, j.Attempt)
				dup++
			}
		}
		t.Logf("job %s: attempt %d, %s", n, j.Attempt, j.Status)
	}
	if j := s.ended("healed-early", deadline); j != nil && j.Attempt != 1 {
		t.Errorf("healed-early was retried (attempt %d) although its node came back within unusable_after", j.Attempt)
	}
	// The cut rank of the late job was stopped by its own agent (no
	// contact for half of unusable_after) before its work ended: it did
	// not go on running, cut off, beside its retry.
	if c := effectLines(t, effectsFile, fmt.Sprintf("end healed-late %d 1", cutRank["healed-late"])); c != 0 {
		t.Errorf("the cut rank %d of healed-late went on running and ended its work of attempt 1 (its agent did not stop it)", cutRank["healed-late"])
		dup++
	}
	b, _ := os.ReadFile(effectsFile)
	t.Logf("effects:\n%s", b)
	record(row{scenario: "partition of a gang node, healed early/late", jobs: len(names), lost: lost, duplicated: dup, took: took.Round(time.Second).String()})
}

// effectLines counts the lines of path that start with prefix.
func effectLines(t *testing.T, path, prefix string) int {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
