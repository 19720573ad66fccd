package server_test

// Reliability of a highly available control plane: two `tide server`
// processes on one real PostgreSQL, real agents, real jobs. The leader is
// killed, then the database restarts, while jobs stream in; every job must
// complete, and run exactly once, counted by the side effect each job's
// command leaves in a shared file.

import (
	"context"
	"encoding/json"
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

	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/tidetest"
)

// replicaProc is a `tide server` process.
type replicaProc struct {
	name, addr, config string
	cmd                *exec.Cmd
	log                *os.File
}

// freeAddr is an address for a `tide server` process, kept across its
// restarts: nothing else takes its port meanwhile (see freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freeport.For(t))
}

// replicaClients returns clients of the two replicas at addrs, with the
// token the first replica wrote to dir/client.json.
func replicaClients(t *testing.T, dir string, addrs []string) (*api.Client, *api.Client) {
	t.Helper()
	cc, err := api.LoadClientConfig(filepath.Join(dir, "client.json"))
	if err != nil || cc.Token == "" {
		t.Fatalf("client config written by the first replica: %v", err)
	}
	clientOf := func(addr string) *api.Client {
		c, err := api.NewClient("http://"+addr, cc.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return clientOf(addrs[0]), clientOf(addrs[1])
}

// deleteComputeOnCleanup deletes the compute when the test ends, through
// the first of the replicas' clients that lives, so that no agent
// outlives the test.
func deleteComputeOnCleanup(t *testing.T, name string, clients ...*api.Client) {
	ctx := context.Background()
	t.Cleanup(func() {
		for _, c := range clients {
			if c.DeleteCompute(ctx, "default", name) == nil {
				waitFor(t, "compute deleted", 30*time.Second, func() bool {
					_, err := c.Compute(ctx, "default", name)
					return api.IsNotFound(err)
				})
				return
			}
		}
	})
}

// logReplicasOnFailure logs the last lines of the named replicas' logs
// in dir if the test fails.
func logReplicasOnFailure(t *testing.T, dir string, lines int, names ...string) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range names {
				b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
				t.Logf("replica %s log (tail):\n%s", n, tail(string(b), lines))
			}
		}
	})
}

// writeReplicaConfig writes a server config for one replica: every replica
// shares the data dir (the local provider's node folders and artifacts)
// and the store, and agents get every replica's URL.
func writeReplicaConfig(t *testing.T, dir, name, addr, storeURL string, all []string) string {
	return writeReplicaConfigWith(t, dir, name, addr, storeURL, all, replicaLayout{dataDir: filepath.Join(dir, "data")})
}

// replicaLayout is where a replica keeps things.
type replicaLayout struct {
	dataDir string
	// machines is the local provider's folder of node folders (default:
	// under the data dir): the "machines" nodes run on, which every
	// leader must find.
	machines string
	// extra is more top-level YAML (storage:, secrets_key_file:).
	extra string
	// scheme of the agents' URLs (default http; https for replicas that
	// serve TLS beyond loopback).
	scheme string
}

func writeReplicaConfigWith(t *testing.T, dir, name, addr, storeURL string, all []string, l replicaLayout) string {
	scheme := l.scheme
	if scheme == "" {
		scheme = "http"
	}
	var urls []string
	for _, a := range all {
		urls = append(urls, `"`+scheme+`://`+a+`"`)
	}
	machines := ""
	if l.machines != "" {
		machines = fmt.Sprintf("\n      data_dir: %q", l.machines)
	}
	cfg := fmt.Sprintf(`data_dir: %q
listen: %q
store: %q
replica: %q
agent_urls: [%s]
client_config: %q
heartbeat_interval: 500ms
unusable_after: 5s
cancel_grace: 2s
resync: 1s
locations:
  - name: local
    provider: local
    default: true
    settings:
      agent_command: [%q, agent]
      grace_period: 5s%s
%s`, l.dataDir, addr, storeURL, name, strings.Join(urls, ", "), filepath.Join(dir, "client.json"), tideBin, machines, l.extra)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startReplica(t *testing.T, dir, name, addr, config string) *replicaProc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tideBin, "server", "--config", config, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{name: name, addr: addr, config: config, cmd: cmd, log: logf}
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the process gracefully (its agents keep running).
func (p *replicaProc) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	}
	p.log.Close()
}

func (p *replicaProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

type readiness struct {
	Status  string `json:"status"`
	Replica string `json:"replica"`
	Leader  string `json:"leader"`
	Leading bool   `json:"leading"`
}

func ready(addr string) (readiness, bool) {
	var r readiness
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return r, false
	}
	defer resp.Body.Close()
	return r, resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&r) == nil
}

// retrying calls fn until it succeeds or the deadline passes: while the
// database restarts the API answers 503 and clients try again.
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

func TestReplicasFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, two servers and agents")
	}
	pg := pgtest.NewCluster(t)
	storeURL := pg.Database(t)
	dir := t.TempDir()
	effects := tidetest.JobWritable(t, filepath.Join(dir, "effects"))
	addrs := []string{freeAddr(t), freeAddr(t)}
	// Agents try b first: while a leads, its assignments reach them
	// through b (the relay between replicas is under test too).
	agentOrder := []string{addrs[1], addrs[0]}
	cfgA := writeReplicaConfig(t, dir, "a", addrs[0], storeURL, agentOrder)
	cfgB := writeReplicaConfig(t, dir, "b", addrs[1], storeURL, agentOrder)
	logReplicasOnFailure(t, dir, 60, "a", "b")

	a := startReplica(t, dir, "a", addrs[0], cfgA)
	waitFor(t, "replica a to lead", 30*time.Second, func() bool { r, ok := ready(addrs[0]); return ok && r.Leading })
	b := startReplica(t, dir, "b", addrs[1], cfgB)
	waitFor(t, "replica b to serve", 30*time.Second, func() bool { r, ok := ready(addrs[1]); return ok && r.Leader == "a" && !r.Leading })

	ca, cb := replicaClients(t, dir, addrs)
	ctx := context.Background()

	// The compute is created through the standby: the leader's controller
	// hears of it through the database.
	keyFile, pub := writeKeyPair(t, dir, "id_ed25519")
	comp, err := spec.ParseCompute("c.yml", []byte("name: ha-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 2\nmax_instances: 2\nidle_time_before_scale_down: 600\n"+
		"ssh_settings:\n  admin_username: alice\n  ssh_key_value: "+pub+"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cb.PutCompute(ctx, "default", comp); err != nil {
		t.Fatal(err)
	}
	deleteComputeOnCleanup(t, "ha-cluster", cb, ca)

	var names []string
	submitVia := func(c *api.Client, i int) {
		name := fmt.Sprintf("ha-%03d", i)
		j, err := spec.ParseJob("job.yml", []byte(fmt.Sprintf("name: %s\ncompute: ha-cluster\ncommand: echo $TIDE_JOB_NAME >> %s; sleep 0.5\n", name, effects)), nil)
		if err != nil {
			t.Fatal(err)
		}
		retrying(t, "submitting "+name, func() error {
			_, err := c.CreateJob(ctx, "default", j)
			if api.ProblemCode(err) == api.CodeConflict {
				return nil // an earlier attempt was stored before its answer was lost
			}
			return err
		})
		names = append(names, name)
	}

	// Phase 1: kill the leader mid-stream; b takes over.
	for i := range 12 {
		submitVia(cb, i)
		if i == 5 {
			// The agents hold their streams on b while a leads: a's
			// assignments reach them only through the relay.
			waitFor(t, "the first jobs to complete under leader a", 60*time.Second, func() bool {
				j, err := cb.Job(ctx, "default", names[0])
				return err == nil && j.Status == api.JobCompleted
			})
			if r, ok := ready(addrs[0]); !ok || !r.Leading {
				t.Fatalf("replica a no longer leads before it was killed: %+v", r)
			}
			// SSH reaches a node through either replica: through b, which
			// holds the agents' streams, and through a, which asks b to
			// have the agent dial a back.
			for name, c := range map[string]*api.Client{"a": ca, "b": cb} {
				out, err := sshEcho(t, c, "ha-cluster", keyFile)
				if err != nil || !strings.Contains(out, "on node ") {
					// Once more: at load average 25 a session through
					// replica a once ended at its handshake (EOF).
					t.Logf("ssh through replica %s: %q, %v; trying again", name, out, err)
					out, err = sshEcho(t, c, "ha-cluster", keyFile)
				}
				if err != nil || !strings.Contains(out, "on node ") {
					t.Errorf("ssh through replica %s: %q, %v", name, out, err)
				}
			}
			a.kill()
			killed := time.Now()
			waitFor(t, "replica b to take over", 30*time.Second, func() bool { r, ok := ready(addrs[1]); return ok && r.Leading })
			t.Logf("replica b leads %v after the leader was killed", time.Since(killed).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// a comes back, as a standby.
	a = startReplica(t, dir, "a", addrs[0], cfgA)
	waitFor(t, "replica a to serve again", 30*time.Second, func() bool { r, ok := ready(addrs[0]); return ok && r.Leader == "b" })

	// Phase 2: restart the database mid-stream; both servers ride it out.
	for i := 12; i < 24; i++ {
		submitVia(ca, i)
		if i == 17 {
			pg.Restart(t, 2*time.Second)
			waitFor(t, "a leader after the database restart", 30*time.Second, func() bool {
				r, ok := ready(addrs[0])
				return ok && r.Leader != ""
			})
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, n := range names {
		var j *api.Job
		waitFor(t, "job "+n+" to end", 90*time.Second, func() bool {
			var err error
			j, err = cb.Job(ctx, "default", n)
			return err == nil && api.JobTerminal(j.Status)
		})
		if j.Status != api.JobCompleted {
			t.Errorf("job %s: %s %s", n, j.Status, j.Error)
		}
	}
	b2, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, l := range strings.Fields(string(b2)) {
		count[l]++
	}
	for _, n := range names {
		if count[n] != 1 {
			t.Errorf("job %s ran %d times, want exactly once", n, count[n])
		}
	}
	if len(count) != len(names) {
		t.Errorf("%d distinct jobs ran, want %d", len(count), len(names))
	}
	_ = b
}

// sshEcho runs echo over SSH on a node of compute, through c's replica,
// as alice with keyFile, checking the node's reported host key.
func sshEcho(t *testing.T, c *api.Client, compute, keyFile string) (string, error) {
	ctx := t.Context()
	nodes, err := c.Nodes(ctx, "default", compute)
	if err != nil || len(nodes) == 0 || nodes[0].SSHHostKey == "" {
		return "", fmt.Errorf("nodes of %s: %+v, %v", compute, nodes, err)
	}
	n := nodes[0]
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(n.SSHHostKey))
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return "", err
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return "", err
	}
	tunnel, err := c.SSHTunnel(ctx, "default", compute, n.ID)
	if err != nil {
		return "", err
	}
	conn, chans, reqs, err := ssh.NewClientConn(tunnel, n.ID, &ssh.ClientConfig{User: "alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 30 * time.Second})
	if err != nil {
		tunnel.Close()
		return "", err
	}
	cl := ssh.NewClient(conn, chans, reqs)
	defer cl.Close()
	sess, err := cl.NewSession()
	if err != nil {
		return "", err
	}
	out, err := sess.CombinedOutput("echo on node $TIDE_NODE_ID")
	return string(out), err
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
