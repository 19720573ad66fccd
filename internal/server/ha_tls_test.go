package server_test

// Replicas on different machines serve TLS beyond loopback from their own
// data dirs: agents and clients pin one CA fingerprint, so every replica
// must serve a certificate of that CA.

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/store/pgtest"
)

// TestReplicasShareTheCA: replica b, with a data dir of its own, made a
// CA of its own and refuses to start while a serves another, naming the
// folder to copy; with a's DATA_DIR/tls copied it starts, and clients and
// agents pinned to a's CA reach b: with a killed, a job runs through b
// over TLS.
func TestReplicasShareTheCA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, two servers and an agent")
	}
	ip := hostIP(t)
	pg := pgtest.NewCluster(t)
	storeURL := pg.Database(t)
	dir := t.TempDir()
	var addrs []string
	for range 2 {
		// Ports nothing else takes before the replicas bind them.
		addrs = append(addrs, net.JoinHostPort(ip, strconv.Itoa(freeport.For(t))))
	}
	layout := func(name string) replicaLayout {
		return replicaLayout{dataDir: filepath.Join(dir, "data-"+name), machines: filepath.Join(dir, "machines"), scheme: "https",
			extra: "secrets_key_file: " + filepath.Join(dir, "key") + "\n"}
	}
	cfgA := writeReplicaConfigWith(t, dir, "a", addrs[0], storeURL, addrs, layout("a"))
	cfgB := writeReplicaConfigWith(t, dir, "b", addrs[1], storeURL, addrs, layout("b"))
	logReplicasOnFailure(t, dir, 40, "a", "b")
	a := startReplica(t, dir, "a", addrs[0], cfgA)
	var cc api.ClientConfig
	waitFor(t, "replica a's client config", 30*time.Second, func() bool {
		var err error
		cc, err = api.LoadClientConfig(filepath.Join(dir, "client.json"))
		return err == nil && cc.Token != ""
	})
	if len(cc.CAFingerprint) != 64 || !strings.HasPrefix(cc.Server, "https://") {
		t.Fatalf("client config of a replica beyond loopback: server %s, CA %q", cc.Server, cc.CAFingerprint)
	}
	pinned := &http.Client{Transport: &http.Transport{TLSClientConfig: api.PinnedTLS(cc.CAFingerprint)}}
	clientOf := func(addr string) *api.Client {
		c, err := api.NewClient("https://"+addr, cc.Token, pinned)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb := clientOf(addrs[0]), clientOf(addrs[1])
	ctx := context.Background()
	waitFor(t, "replica a to serve over TLS", 30*time.Second, func() bool { return ca.Ready(ctx) == nil })

	// b's own CA: refused, naming the folder to copy.
	refused, cancel := context.WithTimeout(ctx, time.Minute) // a b that serves is killed
	defer cancel()
	out, err := exec.CommandContext(refused, tideBin, "server", "--config", cfgB).CombinedOutput()
	if want := "copy replica a's DATA_DIR/tls folder into " + filepath.Join(dir, "data-b"); err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("replica b with a CA of its own: %v, want %q in\n%s", err, want, tail(string(out), 5))
	}
	if err := os.RemoveAll(filepath.Join(dir, "data-b", "tls")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(dir, "data-a", "tls"), filepath.Join(dir, "data-b", "tls")).CombinedOutput(); err != nil {
		t.Fatalf("copying a's tls folder: %v\n%s", err, out)
	}
	startReplica(t, dir, "b", addrs[1], cfgB)
	waitFor(t, "replica b to serve over TLS, pinned to a's CA", 30*time.Second, func() bool { return cb.Ready(ctx) == nil })

	// The node's agent knows both replicas; with a gone, it and the
	// client carry on through b.
	createCompute(t, &instance{t: t, client: ca}, "name: pinned\ntype: amlcompute\nsize: Standard_DS2_v2\nmin_instances: 1\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	deleteComputeOnCleanup(t, "pinned", cb, ca)
	waitFor(t, "the node to be idle", 60*time.Second, func() bool {
		ns, err := ca.Nodes(ctx, "default", "pinned")
		return err == nil && len(ns) == 1 && ns[0].State == api.NodeIdle
	})
	a.kill()
	var j *api.Job
	retrying(t, "submitting through b", func() error {
		var err error
		j, err = cb.CreateJob(ctx, "default", &api.Job{Type: "command", Command: "echo through-b", Compute: "pinned"})
		return err
	})
	waitFor(t, "the job to end through b", 90*time.Second, func() bool {
		got, err := cb.Job(ctx, "default", j.Name)
		if err == nil {
			j = got
		}
		return err == nil && api.JobTerminal(got.Status)
	})
	if j.Status != api.JobCompleted {
		t.Fatalf("job through b: %s (%s)", j.Status, j.Error)
	}
}
