package server_test

// End-to-end test of attaching a machine (type virtualmachine): a real
// sshd in a network namespace (sshlab), attached with the real CLI in
// vm-attach.yml's shape, a real agent pushed by the ssh provider, a job,
// and a detach that leaves nothing of tide on the machine.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/provider/ssh/sshlab"
)

func TestAttachMachine(t *testing.T) {
	l := newSSHLab(t, 2)
	host, other := l.Hosts[0], l.Hosts[1]
	remote := filepath.Join(l.Dir, "remote") // the machine's tide folder (config attached.dir)
	// The server listens on the lab's network, so the agent on the
	// machine reaches it (over TLS, pinning its CA).
	in := startWith(t, t.TempDir(), host.RootIP+":0", "", func(c *config.Server) {
		c.Attached.Binary, c.Attached.Dir, c.Attached.Timeout, c.Attached.DetachTimeout = tideBin, remote, 5*time.Second, 3*time.Second
	})
	defer func() { cleanup(t, in) }() // the server running at the end
	ctx := context.Background()
	dir, token := t.TempDir(), in.srv.AdminToken
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(tideBin, args...)
		cmd.Env = append(os.Environ(), "TIDE_SERVER="+in.cfg.AdvertiseURL, "TIDE_TOKEN="+token,
			"TIDE_CA_FINGERPRINT="+in.srv.CAFingerprint(), "TIDE_CONFIG="+filepath.Join(dir, "none.json"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// vm-attach.yml's shape, with a key file instead of the password.
	vmFile := func(name, key, extra string) string {
		p := filepath.Join(dir, name+".yml")
		body := "$schema: https://azuremlschemas.azureedge.net/latest/vmCompute.schema.json\nname: " + name +
			"\ntype: virtualmachine\nresource_id: " + host.IP + "\n" + extra +
			"ssh_settings:\n  admin_username: root\n  ssh_private_key_file: " + key + "\n  ssh_port: 22\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nothingStored := func(name string) {
		t.Helper()
		if _, err := in.client.Compute(ctx, "default", name); !api.IsNotFound(err) {
			t.Errorf("compute %s after a failed attach: err = %v, want not found", name, err)
		}
		if secs, _ := in.client.Secrets(ctx, "default"); len(secs) != 0 {
			t.Errorf("secrets after a failed attach: %+v", secs)
		}
		if _, err := os.Stat(remote); !os.IsNotExist(err) {
			t.Errorf("a failed attach left %s on the machine (err %v)", remote, err)
		}
	}

	// Bad input: a key the machine refuses, a pinned host key that is
	// another machine's, a port nothing listens on. Each names the field,
	// and nothing is stored or started.
	if _, err := sshlab.WriteKey(filepath.Join(dir, "stranger")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, set, want string }{
		{vmFile("vm-badkey", filepath.Join(dir, "stranger"), ""), "", "ssh_settings.ssh_private_key_file: attaching vm-badkey failed; nothing was stored or started: host root@" + host.IP + ":22: the host refused the key for user root"},
		{vmFile("vm-changed", l.ClientKey, "host_key: "+other.HostKey+"\n"), "", "host_key: attaching vm-changed failed; nothing was stored or started: host root@" + host.IP + ":22: ssh: handshake failed: the host key changed"},
		{vmFile("vm-noport", l.ClientKey, ""), "ssh_settings.ssh_port=2", "address: attaching vm-noport failed; nothing was stored or started: host root@" + host.IP + ":2:"},
	} {
		// compute create -f attaches as attach -f does.
		verb := "attach"
		if tt.set != "" {
			verb = "create"
		}
		args := []string{"compute", verb, "-f", tt.file}
		if tt.set != "" {
			args = append(args, "--set", tt.set)
		}
		out, err := cli(args...)
		if err == nil || !strings.Contains(out, tt.want) {
			t.Errorf("attach %s: %v, output:\n%s\nwant %q", filepath.Base(tt.file), err, out, tt.want)
		}
		nothingStored(strings.TrimSuffix(filepath.Base(tt.file), ".yml"))
	}

	// Attach: the host key is trusted on first use and shown, the key
	// goes into a secret that no answer returns, and the compute is one
	// node with the machine's real CPUs.
	out, err := cli("compute", "attach", "-f", vmFile("vm-example", l.ClientKey, ""))
	if err != nil || !strings.Contains(out, "host_key_fingerprint") || !strings.Contains(out, "(trust on first use)") {
		t.Fatalf("attach: %v\n%s", err, out)
	}
	c, err := in.client.Compute(ctx, "default", "vm-example")
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != api.ComputeTypeVirtualMachine || c.HostKeySource != api.HostKeyFirstUse || c.HostKey == "" || !strings.HasPrefix(c.HostKeyFingerprint, "SHA256:") ||
		c.VCPUs != runtime.NumCPU() || c.MemoryGB <= 0 || c.SSHSettings.SSHPrivateKey != "" || !c.SSHSettings.HasSSHPrivateKey {
		t.Errorf("attached compute: %+v %+v %+v", c, c.VirtualMachine, c.SSHSettings)
	}
	if secs, _ := in.client.Secrets(ctx, "default"); len(secs) != 1 || secs[0].Name != "vm-example-ssh-private-key" || secs[0].Value != "" {
		t.Errorf("secrets: %+v; want vm-example-ssh-private-key without its value", secs)
	}
	if err := in.client.DeleteSecret(ctx, "default", "vm-example-ssh-private-key"); err == nil || !strings.Contains(err.Error(), "detach it first") {
		t.Errorf("deleting the key's secret of an attached compute: %v; want it refused", err)
	}
	if out, err := cli("compute", "attach", "-f", vmFile("vm-again", l.ClientKey, "")); err == nil || !strings.Contains(out, `compute "vm-example" of workspace default already attaches root@`+host.IP+" port 22") {
		t.Errorf("attaching the same login twice: %v\n%s", err, out)
	}
	var nodes []api.Node
	waitFor(t, "the attached machine's node to be idle", 90*time.Second, func() bool {
		nodes, _ = in.client.Nodes(ctx, "default", "vm-example")
		return len(nodes) == 1 && nodes[0].State == api.NodeIdle
	})
	if n := nodes[0]; n.VCPUs != c.VCPUs || n.MemoryGB != c.MemoryGB || !strings.Contains(n.ProviderID, "@"+host.IP+":22") {
		t.Errorf("node %+v; want the machine's %d vCPUs and %g GB on %s", n, c.VCPUs, c.MemoryGB, host.IP)
	}
	out, err = cli("compute", "list")
	if err != nil || !strings.Contains(out, "vm-example") || !strings.Contains(out, "virtualmachine") || !strings.Contains(out, "Succeeded") {
		t.Errorf("compute list: %v\n%s", err, out)
	}

	// A restarted server finds the node through the provider it builds
	// again from the record.
	in.shutdown()
	in = startWith(t, in.cfg.DataDir, in.cfg.Listen, token, func(c *config.Server) {
		c.Attached.Binary, c.Attached.Dir, c.Attached.Timeout, c.Attached.DetachTimeout = tideBin, remote, 5*time.Second, 3*time.Second
	})

	// A job runs on the machine.
	j := submit(t, in, "command: echo ran-on-$TIDE_TEST_MARK\ncompute: vm-example\nenvironment_variables:\n  TIDE_TEST_MARK: attached\n")
	if j = waitJob(t, in, j.Name, 60*time.Second); j.Status != api.JobCompleted || len(j.Ranks) != 1 || j.Ranks[0].Node != nodes[0].ID {
		t.Fatalf("job: %s %s ranks %+v", j.Status, j.Error, j.Ranks)
	}
	if log := logText(t, in, j.Name); !strings.Contains(log, "ran-on-attached") {
		t.Errorf("job log: %q", log)
	}

	// Detaching with a running job is refused, naming it; --force
	// cancels it and the machine is left as it was.
	long := submit(t, in, "command: sleep 300\ncompute: vm-example\n")
	waitFor(t, "the long job to run", 30*time.Second, func() bool {
		j, err := in.client.Job(ctx, "default", long.Name)
		return err == nil && j.Status == api.JobRunning
	})
	if out, err := cli("compute", "detach", "vm-example"); err == nil || !strings.Contains(out, long.Name+" (Running)") || !strings.Contains(out, "--force") {
		t.Errorf("detach with a running job: %v\n%s", err, out)
	}
	if err := in.client.DeleteCompute(ctx, "default", "vm-example"); err == nil || !strings.Contains(err.Error(), "tide compute detach vm-example") {
		t.Errorf("delete of an attached compute: %v; want a hint to detach", err)
	}
	if out, err := cli("compute", "detach", "vm-example", "--force"); err != nil {
		t.Fatalf("detach --force: %v\n%s", err, out)
	}
	waitFor(t, "the detached compute to go", 60*time.Second, func() bool {
		_, err := in.client.Compute(ctx, "default", "vm-example")
		return api.IsNotFound(err)
	})
	if j, _ := in.client.Job(ctx, "default", long.Name); j == nil || j.Status != api.JobCanceled {
		t.Errorf("the long job after detach --force: %+v", j)
	}
	if secs, _ := in.client.Secrets(ctx, "default"); len(secs) != 0 {
		t.Errorf("secrets after detach: %+v", secs)
	}
	// A status probe begun just before the compute went may still be
	// running (it lists an empty folder and exits); it must end by itself
	// and leave nothing behind.
	var pids []string
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if pids = processesNaming(remote); len(pids) == 0 {
			break
		}
	}
	if len(pids) > 0 {
		t.Errorf("processes still run from %s 15 s after detach: %v", remote, pids)
	}
	if _, err := os.Stat(remote); !os.IsNotExist(err) {
		entries, _ := exec.Command("find", remote).CombinedOutput()
		t.Errorf("detach left %s on the machine:\n%s", remote, entries)
	}

	// Attached again with its host key pinned (another of the machine's
	// keys than the one trusted on first use): the node starts, and a
	// detach without jobs needs no --force.
	if out, err := cli("compute", "attach", "-f", vmFile("vm-example", l.ClientKey, "host_key: "+host.HostKey+"\n")); err != nil || !strings.Contains(out, "(pinned)") {
		t.Fatalf("attach with host_key: %v\n%s", err, out)
	}
	if c, err := in.client.Compute(ctx, "default", "vm-example"); err != nil || c.HostKey != host.HostKey || c.HostKeySource != api.HostKeyPinned {
		t.Errorf("pinned attach: %v %+v", err, c)
	}
	waitFor(t, "the pinned machine's node to be idle", 90*time.Second, func() bool {
		nodes, _ = in.client.Nodes(ctx, "default", "vm-example")
		return len(nodes) == 1 && nodes[0].State == api.NodeIdle
	})
	if out, err := cli("compute", "detach", "vm-example"); err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}
	waitFor(t, "the detached compute to go", 60*time.Second, func() bool {
		_, err := in.client.Compute(ctx, "default", "vm-example")
		return api.IsNotFound(err)
	})
	if _, err := os.Stat(remote); !os.IsNotExist(err) {
		t.Errorf("the second detach left %s on the machine (err %v)", remote, err)
	}

	// A machine that no longer answers (destroyed before its detach) does
	// not hold its compute forever: after attached.detach_timeout the node
	// is forgotten, and its agent is left there (stopped here by hand).
	if out, err := cli("compute", "attach", "-f", vmFile("vm-example", l.ClientKey, "")); err != nil {
		t.Fatalf("attach: %v\n%s", err, out)
	}
	waitFor(t, "the node to be idle", 90*time.Second, func() bool {
		nodes, _ = in.client.Nodes(ctx, "default", "vm-example")
		return len(nodes) == 1 && nodes[0].State == api.NodeIdle
	})
	if err := l.Cut(0, true); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = l.Cut(0, false)
		for _, p := range processesNaming(remote) {
			pid, _, _ := strings.Cut(p, ":")
			_ = exec.Command("kill", "-9", pid).Run()
		}
		os.RemoveAll(remote)
	}()
	if out, err := cli("compute", "detach", "vm-example"); err != nil {
		t.Fatalf("detach of an unreachable machine: %v\n%s", err, out)
	}
	waitFor(t, "the unreachable machine's compute to go", 60*time.Second, func() bool {
		_, err := in.client.Compute(ctx, "default", "vm-example")
		return api.IsNotFound(err)
	})
	if len(processesNaming(remote)) == 0 {
		t.Error("no agent was left on the unreachable machine: the detach did not take the unreachable path")
	}
}

// newSSHLab starts n sshd hosts in network namespaces, removed when the
// test ends (after its own deferred cleanups); it skips the test where
// the machine cannot run them (fails under CI).
func newSSHLab(t *testing.T, n int) *sshlab.Lab {
	t.Helper()
	if miss := sshlab.Missing(); miss != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("ssh lab: %s", miss)
		}
		t.Skipf("ssh lab: %s", miss)
	}
	l, err := sshlab.New(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// processesNaming lists the processes whose command line names s.
func processesNaming(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/cmdline")+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
