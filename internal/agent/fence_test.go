package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestFence: with the server's unusable_after at 600 ms, an agent that gets
// no answer at all for 300 ms (a partition) stops its job, reported as a
// node failure once the server answers again; a server answering errors
// (down for a restart) for longer does not stop it.
func TestFence(t *testing.T) {
	srv := newFakeServer(t)
	srv.welcome.UnusableAfterMS = 600
	dir := t.TempDir()
	startAgent(t, srv, dir)
	as := assignment("long", `echo started; while [ ! -f release ]; do sleep 0.02; done; echo released`)
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the first line", func() bool { return len(srv.lines(as.ID)) > 0 })
	jobDir := filepath.Join(dir, "jobs/ws1/long/1")

	// A server that answers 503 for 1.5 s: the job runs on.
	srv.setDown(true)
	time.Sleep(1500 * time.Millisecond) // the time the agent must hold out, not a wait for an event
	srv.setDown(false)
	if _, ok := srv.final(as.ID); ok {
		t.Fatal("the job ended while the server answered errors")
	}
	if b, err := os.ReadFile(filepath.Join(jobDir, "logs/std_log.txt")); err != nil || !strings.Contains(string(b), "started") {
		t.Fatalf("job log: %q, %v", b, err)
	}

	// Silence: the agent stops the job itself.
	srv.setSilent(true)
	t.Cleanup(func() { srv.setSilent(false) }) // before the agent stops, should the test fail here
	waitFor(t, 10*time.Second, "the job's processes to end", func() bool {
		_, err := os.Stat(filepath.Join(dir, "jobs/ws1/long/1/logs/std_log.txt"))
		return err == nil && len(jobProcesses(jobDir)) == 0
	})
	srv.setSilent(false)
	waitFor(t, 10*time.Second, "the final status", func() bool { _, ok := srv.final(as.ID); return ok })
	st, _ := srv.final(as.ID)
	if st.Status != api.JobFailed || !st.Preempted || !strings.Contains(st.Error, "lost contact with the server") {
		t.Fatalf("final = %+v; want Failed as a node failure, saying the node lost contact", st)
	}
}

// jobProcesses lists the processes whose working folder is dir.
func jobProcesses(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if cwd, _ := os.Readlink(p + "/cwd"); cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// TestHeartbeatsKeepTheirPaceWhenAnswersAreSlow: a heartbeat leaves an
// interval after the last one left, not an interval after its answer. A
// server slow to answer (700 ms here, its writer busy under load) spaced
// the heartbeats it heard by 1.7 s, which made live nodes look silent to
// the tests' 3 s unusable_after and fenced their jobs.
func TestHeartbeatsKeepTheirPaceWhenAnswersAreSlow(t *testing.T) {
	srv := newFakeServer(t)
	srv.mu.Lock()
	srv.beatDelay = 700 * time.Millisecond
	srv.mu.Unlock()
	startAgent(t, srv, t.TempDir())
	var times []time.Time
	waitFor(t, 20*time.Second, "six heartbeats", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		times = slices.Clone(srv.beatTimes)
		return len(times) >= 6
	})
	var gaps []time.Duration
	for i := 2; i < len(times); i++ { // from the second: the first follows registration
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2]; med > 1400*time.Millisecond {
		t.Errorf("heartbeats 1 s apart with answers taking 700 ms arrived %s apart (median; gaps %v), want about 1 s", med, gaps)
	}
}
