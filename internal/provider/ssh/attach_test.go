package ssh_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/provider/providertest"
	"github.com/tideml/tide/internal/provider/ssh"
	"github.com/tideml/tide/internal/provider/ssh/sshlab"
)

// TestProbeAndDetach checks what attaching a machine asks of the ssh
// provider: Probe trusts the shown host key on first use or checks a
// pinned one, says when the key is refused, and reads the machine's real
// CPUs; Detach leaves the host as it was once its nodes are gone.
func TestProbeAndDetach(t *testing.T) {
	l := requireLab(t)
	ctx := t.Context()
	key, err := os.ReadFile(l.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	h0, h1 := l.Hosts[0], l.Hosts[1]
	host := ssh.Host{Address: h0.IP, User: "root", PrivateKey: key}

	m, err := ssh.Probe(ctx, host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.HostKey == "" || m.VCPUs != runtime.NumCPU() || m.MemoryGB <= 0 {
		t.Errorf("probe: %+v; want a host key, %d CPUs and some memory", m, runtime.NumCPU())
	}
	pinned := host
	pinned.HostKey = h0.HostKey
	if m2, err := ssh.Probe(ctx, pinned, 10*time.Second); err != nil || m2.HostKey != h0.HostKey {
		t.Errorf("probe with the pinned key: %v %q", err, m2.HostKey)
	}
	pinned.HostKey = h1.HostKey // another machine's key
	var hk *ssh.HostKeyError
	if _, err := ssh.Probe(ctx, pinned, 10*time.Second); !errors.As(err, &hk) || !strings.Contains(err.Error(), "the host key changed") {
		t.Errorf("probe with another host's key: %v; want a HostKeyError", err)
	}
	strangerFile := filepath.Join(t.TempDir(), "stranger")
	if _, err := sshlab.WriteKey(strangerFile); err != nil {
		t.Fatal(err)
	}
	stranger, _ := os.ReadFile(strangerFile)
	refused := host
	refused.PrivateKey = stranger
	var ue *ssh.UnreachableError
	if _, err := ssh.Probe(ctx, refused, 10*time.Second); !errors.As(err, &ue) || !strings.Contains(err.Error(), "the host refused the key for user root") {
		t.Errorf("probe with a key the host refuses: %v", err)
	}

	// Detach removes the binary and tide's folders once no node is left,
	// and keeps what else is in the folder.
	dir := filepath.Join(t.TempDir(), "tide")
	host.HostKey, host.Dir, host.Capacity = h0.HostKey, dir, 1
	exe, _ := os.Executable()
	p, err := ssh.New(ssh.Config{Hosts: []ssh.Host{host}, Binary: exe, Env: []string{"TIDE_TEST_AGENT=1"}, GracePeriod: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, providertest.Request("attached-1")); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(ctx); err == nil || !strings.Contains(err.Error(), "still holds node folders") {
		t.Errorf("detach with a node: %v; want it refused", err)
	}
	if err := p.Delete(ctx, "attached-1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("detach left %s (err %v)", dir, err)
	}
	// A folder that held something else before keeps it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, providertest.Request("attached-2")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "attached-2"); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "mine" {
		t.Errorf("after detach %s holds %v; want only mine", dir, entries)
	}
}
