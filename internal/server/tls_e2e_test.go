package server_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/server"
)

// hostIP is an address of this machine beyond loopback, so the test's
// traffic takes a real interface.
func hostIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this machine has no non-loopback IPv4 address to serve TLS on")
	}
	t.Skip("no non-loopback IPv4 address")
	return ""
}

// TestTLSBeyondLoopback: a server listening beyond loopback serves HTTPS
// with its own CA; the CLI and the agents pin the CA's fingerprint and a
// job runs end to end; plain HTTP, an unpinned client and a wrong pin are
// refused, the wrong pin with a message that says so.
func TestTLSBeyondLoopback(t *testing.T) {
	ip := hostIP(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir)
	cfg.Store = testStore(t, dir)
	cfg.Listen = ln.Addr().String()
	cfg.AdvertiseURL = cfg.Scheme() + "://" + cfg.Listen
	if cfg.Scheme() != "https" {
		t.Fatalf("listening on %s: scheme %s, want https beyond loopback", cfg.Listen, cfg.Scheme())
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fp := srv.CAFingerprint()
	if len(fp) != 64 {
		t.Fatalf("CA fingerprint %q", fp)
	}
	in := &instance{t: t, cfg: cfg, srv: srv, stop: cancel, done: make(chan error, 1)}
	go func() { in.done <- srv.Serve(ctx, ln) }()
	pinned := &http.Client{Transport: &http.Transport{TLSClientConfig: api.PinnedTLS(fp)}}
	if in.client, err = api.NewClient(cfg.AdvertiseURL, srv.AdminToken, pinned); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(t, in) })
	waitFor(t, "the TLS server to answer", 10*time.Second, func() bool { return in.client.Ready(context.Background()) == nil })

	if _, err := http.Get("http://" + cfg.Listen + "/livez"); err == nil {
		// The TLS listener answers plain HTTP with a 400 at most.
		resp, _ := http.Get("http://" + cfg.Listen + "/v1/workspaces")
		if resp != nil && resp.StatusCode < 400 {
			t.Errorf("plain HTTP beyond loopback answered %d", resp.StatusCode)
		}
	}
	if _, err := http.Get(cfg.AdvertiseURL + "/livez"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that does not pin the CA: %v", err)
	}
	// An agent pinned to another CA refuses the server and says why.
	wrong := agent.Flags{CAFingerprint: strings.Repeat("ab", 32)}.Config("x").HTTPClient
	if _, err := wrong.Get(cfg.AdvertiseURL + "/livez"); err == nil || !strings.Contains(err.Error(), "does not chain to the pinned CA "+strings.Repeat("ab", 32)) {
		t.Errorf("an agent with a wrong pin: %v", err)
	}

	// The agents reach the server over TLS, pinned: a job runs.
	createCompute(t, in, "name: tls\ntype: amlcompute\nsize: Standard_DS2_v2\nmax_instances: 1\n")
	j := submit(t, in, "command: echo over-tls\ncompute: tls\n")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("sh", "-c", "for f in $(find "+dir+" -name agent.log); do echo $f; tail -n 20 $f; done").CombinedOutput()
			evs, _ := in.client.ComputeEvents(context.Background(), "default", "tls")
			t.Logf("agent logs:\n%s\nevents: %+v", logs, evs[:min(len(evs), 5)])
		}
	})
	if done := waitJob(t, in, j.Name, 90*time.Second); done.Status != api.JobCompleted {
		logs, _ := exec.Command("sh", "-c", "tail -n 20 "+dir+"/locations/*/nodes/*/*.log").CombinedOutput()
		t.Fatalf("job over TLS: %s (%s)\n%s", done.Status, done.Error, logs)
	}
	if log := logText(t, in, j.Name); !strings.Contains(log, "over-tls") {
		t.Errorf("job log: %q", log)
	}
	// The CLI pins the CA from its environment (or its config's context).
	cmd := exec.Command(tideBin, "whoami")
	cmd.Env = append(os.Environ(), "TIDE_SERVER="+cfg.AdvertiseURL, "TIDE_TOKEN="+srv.AdminToken, "TIDE_CA_FINGERPRINT="+fp, "TIDE_CONFIG="+dir+"/none.json")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "admin") {
		t.Errorf("tide whoami over TLS: %v\n%s", err, out)
	}
	cmd = exec.Command(tideBin, "whoami")
	cmd.Env = append(os.Environ(), "TIDE_SERVER="+cfg.AdvertiseURL, "TIDE_TOKEN="+srv.AdminToken, "TIDE_CA_FINGERPRINT="+strings.Repeat("cd", 32), "TIDE_CONFIG="+dir+"/none.json")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "pinned CA") {
		t.Errorf("tide whoami with a wrong pin: %v\n%s", err, out)
	}
}
