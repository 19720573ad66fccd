package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/spec"
)

// server is a `tide server` process that the test kills and restarts on
// the same data dir, address and store.
type server struct {
	t      *testing.T
	dir    string // test folder: config, logs, client config
	data   string // the server's data dir
	addr   string
	config string
	cmd    *exec.Cmd
	logf   *os.File
	client *api.Client
	starts int
}

// options shape a server's config.
type options struct {
	store         string // "" for SQLite in the data dir
	data          string // data dir ("" for DIR/data)
	unusableAfter time.Duration
	maxDataSize   string // max_data_size ("" for the default)
	settings      string // more settings of the local location, YAML lines
	extra         string // more top-level config lines
	locations     string // more locations, YAML list items
	// A replica of several servers on one store: its name, its address
	// (the replicas' addresses are known before any starts, for
	// agentAddrs) and the client config the first replica wrote.
	replica      string
	addr         string
	agentAddrs   []string
	clientConfig string
}

// freeAddr is an address for a `tide server` process, kept across its
// restarts: nothing else takes its port meanwhile (see freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freeport.For(t))
}

// newServer writes the config and starts the server. The local location
// oversubscribes so the suite runs on hosts smaller than its sizes.
func newServer(t *testing.T, o options) *server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts tide servers, agents and jobs")
	}
	dir := t.TempDir()
	if o.data == "" {
		o.data = filepath.Join(dir, "data")
	}
	if o.unusableAfter == 0 {
		o.unusableAfter = 10 * time.Second
	}
	extra := o.extra // top-level config lines
	if o.maxDataSize != "" {
		extra = "max_data_size: " + o.maxDataSize + "\n"
	}
	if o.addr == "" {
		o.addr = freeAddr(t)
	}
	if !strings.HasPrefix(o.addr, "127.") {
		extra += "tls: off\n" // the suite speaks plain HTTP, also on a lab network
	}
	if o.clientConfig == "" {
		o.clientConfig = filepath.Join(dir, "client.json")
	}
	if o.replica != "" {
		var urls []string
		for _, a := range o.agentAddrs {
			urls = append(urls, `"http://`+a+`"`)
		}
		extra += fmt.Sprintf("replica: %q\nagent_urls: [%s]\n", o.replica, strings.Join(urls, ", "))
	}
	s := &server{t: t, dir: dir, data: o.data, addr: o.addr, config: filepath.Join(dir, "server.yaml")}
	cfg := fmt.Sprintf(`data_dir: %q
listen: %q
store: %q
client_config: %q
heartbeat_interval: 500ms
unusable_after: %s
cancel_grace: 2s
preempt_grace: 3s
resync: 1s
%slocations:
  - name: local
    provider: local
    default: true
    oversubscribe: true
    settings:
      agent_command: [%q, agent]
      grace_period: 5s
%s%s`, s.data, s.addr, o.store, o.clientConfig, o.unusableAfter, extra, tideBin, o.settings, o.locations)
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	cc, err := api.LoadClientConfig(o.clientConfig)
	if err != nil || cc.Token == "" {
		t.Fatalf("client config written by the server: %v", err)
	}
	if s.client, err = api.NewClient("http://"+s.addr, cc.Token, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Logf("server log (tail):\n%s", tail(string(b), 80))
		}
	})
	return s
}

// start starts the server process and waits until it answers.
func (s *server) start() {
	s.t.Helper()
	if err := s.restart(); err != nil {
		s.t.Fatal(err)
	}
}

// restart is start for goroutines other than the test's: it returns the
// error instead of failing the test.
func (s *server) restart() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(tideBin, "server", "--config", s.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.logf = cmd, logf
	s.starts++
	if s.starts == 1 {
		s.t.Cleanup(s.stop)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not answer within a minute of its start %d", s.starts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill ends the server with SIGKILL: no shutdown, no last write.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.logf.Close()
}

// stop ends the server gracefully (its agents keep running).
func (s *server) stop() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
		s.logf.Close()
	}
}

// retrying calls fn until it succeeds or a minute passes: while the server
// restarts, requests fail and clients try again.
func retrying(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createCompute creates a cluster through s, retrying while it restarts.
func (s *server) createCompute(yml string) {
	s.t.Helper()
	c, err := spec.ParseCompute("c.yml", []byte(yml), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	retrying(s.t, "creating compute "+c.Name, func() error {
		_, _, err := s.client.PutCompute(context.Background(), "default", c)
		return err
	})
	s.t.Cleanup(func() { s.deleteCompute(c.Name) })
}

// deleteCompute deletes a compute and waits until it is gone, so that no
// agent outlives the test.
func (s *server) deleteCompute(name string) {
	if s.cmd.ProcessState != nil {
		return // stopped by the test
	}
	ctx := context.Background()
	if err := s.client.DeleteCompute(ctx, "default", name); err != nil && !api.IsNotFound(err) {
		s.t.Logf("deleting compute %s: %v", name, err)
		return
	}
	waitFor(s.t, "compute "+name+" deleted", 60*time.Second, func() bool {
		_, err := s.client.Compute(ctx, "default", name)
		return api.IsNotFound(err)
	})
}

// submit creates a job, retrying while the server restarts; a retry that
// finds the job already stored (its first answer was lost) succeeded.
func (s *server) submit(yml string) {
	s.t.Helper()
	j, err := spec.ParseJob("job.yml", []byte(yml), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	retrying(s.t, "submitting "+j.Name, func() error {
		_, err := s.client.CreateJob(context.Background(), "default", j)
		if api.ProblemCode(err) == api.CodeConflict {
			return nil
		}
		return err
	})
}

// ended waits until job name ended or the deadline passed, and returns it
// then (nil if it had not ended).
func (s *server) ended(name string, deadline time.Time) *api.Job {
	for {
		j, err := s.client.Job(context.Background(), "default", name)
		if err == nil && api.JobTerminal(j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exactlyOnce waits until each job ended (or the deadline passed) and
// checks that it ended Completed, with one terminal event, and left its
// name in effectsFile exactly once. It returns how many were lost (stuck,
// failed or without their line) and how many ran or ended twice.
func (s *server) exactlyOnce(names []string, effectsFile string, deadline time.Time) (lost, dup int) {
	t := s.t
	t.Helper()
	for _, n := range names {
		j := s.ended(n, deadline)
		switch {
		case j == nil:
			t.Errorf("job %s is stuck: not ended", n)
			lost++
			continue
		case j.Status != api.JobCompleted:
			t.Errorf("job %s ended %s: %s", n, j.Status, j.Error)
			lost++
		}
		if !s.endedOnce(n) {
			dup++
		}
	}
	count := effects(t, effectsFile)
	for _, n := range names {
		switch c := count[n]; {
		case c == 0:
			t.Errorf("job %s left no side effect", n)
			lost++
		case c > 1:
			t.Errorf("job %s ran %d times", n, c)
			dup++
			var es []api.Event
			retrying(t, "events of "+n, func() (err error) {
				es, err = s.client.JobEvents(context.Background(), "default", n)
				return err
			})
			for _, e := range es {
				t.Logf("  %s %s: %s %s", n, e.Time.Format("15:04:05.000"), e.Kind, e.Message)
			}
		}
	}
	if len(count) > len(names) {
		t.Errorf("%d distinct side effects for %d jobs", len(count), len(names))
	}
	return lost, dup
}

// endedOnce checks that job name has exactly one terminal event.
func (s *server) endedOnce(name string) bool {
	s.t.Helper()
	var es []api.Event
	retrying(s.t, "events of "+name, func() (err error) {
		es, err = s.client.JobEvents(context.Background(), "default", name)
		return err
	})
	terminal := 0
	for _, e := range es {
		if api.JobTerminal(e.Kind) {
			terminal++
		}
	}
	if terminal != 1 {
		s.t.Errorf("job %s ended %d times (events %+v)", name, terminal, es)
	}
	return terminal == 1
}

// effects counts the lines of a side-effect file by content.
func effects(t *testing.T, path string) map[string]int {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		count[l]++
	}
	return count
}

// orphans lists the processes that still run from dir: agents (their
// command line names their node folder) and jobs (their working folder).
func orphans(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(p + "/cmdline")
		cwd, _ := os.Readlink(p + "/cwd")
		cl := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(cl, dir) || strings.HasPrefix(cwd, dir+"/") {
			out = append(out, filepath.Base(p)+": "+cl)
		}
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
