package server_test

// End-to-end tests of SSH into nodes: OpenSSH's own ssh and scp, with
// `tide compute ssh-proxy` as their ProxyCommand, through a real server to
// the SSH server of real agents (a local instance, a Docker container).

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
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
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/dockerengine/dockertest"
	"github.com/tideml/tide/internal/service"
)

// sshClient is OpenSSH's client with a key of its own, reaching a test
// server's nodes through tide compute ssh-proxy.
type sshClient struct {
	t    *testing.T
	in   *instance
	dir  string // HOME and XDG_CONFIG_HOME of the client
	key  string // private key file
	pub  string // its public key, authorized_keys format
	bins map[string]string
}

// newSSHClient makes a key pair and finds ssh and scp (CI installs
// openssh-client; elsewhere the test skips without them).
func newSSHClient(t *testing.T, in *instance) *sshClient {
	t.Helper()
	c := &sshClient{t: t, in: in, dir: t.TempDir(), bins: map[string]string{}}
	for _, b := range []string{"ssh", "scp"} {
		p, err := exec.LookPath(b)
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing; .ci/run installs openssh-client", b)
			}
			t.Skipf("%s is not installed", b)
		}
		c.bins[b] = p
	}
	c.key, c.pub = writeKeyPair(t, c.dir, "id_ed25519")
	return c
}

func writeKeyPair(t *testing.T, dir, name string) (keyFile, pub string) {
	t.Helper()
	pk, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "tide-test")
	if err != nil {
		t.Fatal(err)
	}
	keyFile = filepath.Join(dir, name)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	spk, err := ssh.NewPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return keyFile, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(spk))) + " tide-test"
}

func (c *sshClient) env() []string {
	return append(os.Environ(), "TIDE_SERVER="+c.in.cfg.AdvertiseURL, "TIDE_TOKEN="+c.in.srv.AdminToken, "TIDE_CA_FINGERPRINT="+c.in.srv.CAFingerprint(),
		"TIDE_WORKSPACE=default", "XDG_CONFIG_HOME="+c.dir, "HOME="+c.dir)
}

// opts are OpenSSH options for a node of compute, the ProxyCommand being
// the line list-nodes prints with this test's tide binary.
func (c *sshClient) opts(compute, node, key string) []string {
	return []string{"-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", fmt.Sprintf("ProxyCommand=%s compute ssh-proxy %s --node-id %s -w default", tideBin, compute, node)}
}

// command is program (ssh or scp) with the options for node, then args.
func (c *sshClient) command(program, compute, node, key string, args ...string) *exec.Cmd {
	cmd := exec.Command(c.bins[program], append(c.opts(compute, node, key), args...)...)
	cmd.Env = c.env()
	return cmd
}

// run runs a command on a node and returns its output.
func (c *sshClient) run(compute, node, user, command string) (string, error) {
	out, err := c.command("ssh", compute, node, c.key, user+"@"+node, command).CombinedOutput()
	return string(out), err
}

// TestSSHIntoInstance: a compute instance with a key takes real ssh and
// scp through the server (commands, SFTP both ways, a forwarded port, the
// job's scrubbed environment), refuses another key, is kept from its idle
// shutdown while a session is open, and stops once it closes.
func TestSSHIntoInstance(t *testing.T) {
	dir := t.TempDir()
	in := start(t, dir, "", "")
	t.Cleanup(func() { cleanup(t, in) })
	c := newSSHClient(t, in)
	ctx := context.Background()
	const name = "ci-ssh"
	yml := "name: " + name + "\ntype: computeinstance\nsize: Standard_DS3_v2\nssh_settings:\n  ssh_key_value: " + c.pub + "\n"
	createCompute(t, in, yml)
	waitState(t, in, name, api.InstanceRunning, 60*time.Second)
	node := service.InstanceNodeID("default", name)
	nodeDir := filepath.Join(dir, "locations", "local", "nodes", node)

	// list-nodes prints the line this test's options follow.
	nodes, err := in.client.Nodes(ctx, "default", name)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	want := "ssh -o ProxyCommand='tide compute ssh-proxy ci-ssh --node-id " + node + " -w default' -o HostKeyAlias=" + node + " azureuser@" + node
	if nodes[0].Connection != want {
		t.Fatalf("connection string %q, want %q", nodes[0].Connection, want)
	}

	// A command, in the node's home, as a job would run.
	out, err := c.run(name, node, "azureuser", `echo "hello from $TIDE_NODE_ID in $PWD"; env | sort; echo --- parent; tr '\0' '\n' < /proc/$PPID/environ`)
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	if !strings.Contains(out, "hello from "+node+" in "+filepath.Join(nodeDir, "home")) {
		t.Fatalf("ssh output:\n%s", out)
	}
	if strings.Contains(out, in.srv.AdminToken) || nodeTokenRE.MatchString(out) || strings.Contains(out, "TIDE_AGENT_TOKEN=") {
		t.Fatalf("an SSH session read a token:\n%s", out)
	}
	own, _, _ := strings.Cut(out, "--- parent")
	for _, v := range []string{"XDG_CONFIG_HOME=", "TIDE_TEST", "CI=", "TIDE_SERVER="} {
		if strings.Contains(own, v) {
			t.Errorf("the SSH session inherited the agent's setting %s:\n%s", v, own)
		}
	}
	t.Log("ssh ran a command as a job would")

	// The exit status comes back.
	if out, err := c.run(name, node, "azureuser", "exit 7"); exitCode(err) != 7 {
		t.Fatalf("exit 7 through ssh: %v %s", err, out)
	}

	// scp both ways (OpenSSH's scp speaks SFTP).
	local := filepath.Join(c.dir, "up.txt")
	if err := os.WriteFile(local, []byte("round trip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.command("scp", name, node, c.key, local, "azureuser@"+node+":up.txt").CombinedOutput(); err != nil {
		t.Fatalf("scp up: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(nodeDir, "home", "up.txt")); err != nil || string(b) != "round trip\n" {
		t.Fatalf("uploaded file on the node: %q %v", b, err)
	}
	back := filepath.Join(c.dir, "back.txt")
	if out, err := c.command("scp", name, node, c.key, "azureuser@"+node+":up.txt", back).CombinedOutput(); err != nil {
		t.Fatalf("scp down: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != "round trip\n" {
		t.Fatalf("downloaded file: %q %v", b, err)
	}
	t.Log("scp up and down")

	// A port forward (ssh -W, as -L does per connection) reaches a port on
	// the node: here an HTTP server on the node's loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "forwarded ok") })}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	fw := c.command("ssh", name, node, c.key, "-W", ln.Addr().String(), "azureuser@"+node)
	fw.Stdin = strings.NewReader("GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	if out, err := fw.CombinedOutput(); err != nil || !strings.Contains(string(out), "forwarded ok") {
		t.Fatalf("ssh -W: %v\n%s", err, out)
	}
	t.Log("port forwarding")

	// Another key is refused.
	other, _ := writeKeyPair(t, c.dir, "other")
	if out, err := c.command("ssh", name, node, other, "azureuser@"+node, "echo in").CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("ssh with a key not in ssh_key_value: %v\n%s", err, out)
	}

	// connect-ssh runs ssh the same way (a command after --).
	cs := exec.Command(tideBin, "compute", "connect-ssh", name, "-i", c.key, "--", "echo", "via-connect-ssh")
	cs.Env = c.env()
	if out, err := cs.CombinedOutput(); err != nil || !strings.Contains(string(out), "via-connect-ssh") {
		t.Fatalf("tide compute connect-ssh: %v\n%s", err, out)
	}
	t.Log("connect-ssh")

	// An open session holds off the idle shutdown (now PT4S)...
	hold := c.command("ssh", name, node, c.key, "azureuser@"+node, "echo holding; sleep 60")
	stdout, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Its own process group, so closing it ends ssh-proxy too.
	hold.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	closeHold := func() { _ = syscall.Kill(-hold.Process.Pid, syscall.SIGKILL); _ = hold.Wait() }
	t.Cleanup(closeHold)
	if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "holding\n" {
		t.Fatalf("holding session: %q %v", l, err)
	}
	waitFor(t, "the session in the instance's activity", 10*time.Second, func() bool {
		a := instanceState(t, in, name).Instance.Activity
		return a != nil && a.SSHSessions == 1
	})
	createCompute(t, in, yml+"idle_time_before_shutdown: PT4S\n")
	held := time.Now()
	for time.Since(held) < 8*time.Second {
		if st := instanceState(t, in, name).Instance.State; st != api.InstanceRunning {
			t.Fatalf("instance went %s with an SSH session open", st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Log("an open session kept the instance up past its idle time")
	// ...and once it closes the instance stops, saying why.
	closeHold()
	st := waitState(t, in, name, api.InstanceStopped, 30*time.Second)
	if op := st.Instance.LastOperation; op.OperationTrigger != api.TriggerIdleShutdown || !strings.Contains(op.Reason, "no SSH session") {
		t.Fatalf("idle shutdown recorded as %+v", op)
	}
	// A stopped instance says how to start it.
	px := exec.Command(tideBin, "compute", "ssh-proxy", name)
	px.Env = c.env()
	if out, err := px.CombinedOutput(); err == nil || !strings.Contains(string(out), "instance is Stopped; start it with tide compute start "+name) {
		t.Fatalf("ssh-proxy to a stopped instance: %v\n%s", err, out)
	}
}

// TestSSHRefused: ssh_public_access_enabled: false and a compute without a
// key refuse SSH, saying which field; list-nodes says so per node.
func TestSSHRefused(t *testing.T) {
	in, _ := newServer(t)
	c := newSSHClient(t, in)
	createCompute(t, in, "name: closed\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\nssh_public_access_enabled: false\nssh_settings:\n  admin_username: azureuser\n  ssh_key_value: "+c.pub+"\n")
	createCompute(t, in, "name: keyless\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\n")
	for name, want := range map[string]string{
		"closed":  `SSH is disabled on compute "closed" (ssh_public_access_enabled: false)`,
		"keyless": `compute "keyless" has no SSH key: create it with ssh_settings.ssh_key_value`,
	} {
		px := exec.Command(tideBin, "compute", "ssh-proxy", name)
		px.Env = c.env()
		out, err := px.CombinedOutput()
		if exitCode(err) != 1 || !strings.Contains(string(out), want) {
			t.Errorf("ssh-proxy %s: %v\n%s\nwant %q", name, err, out, want)
		}
	}
}

// TestSSHIntoDockerNode: a cluster node that is a Docker container (no
// port published) takes ssh through the server, as its admin_username.
func TestSSHIntoDockerNode(t *testing.T) {
	engine := dockertest.Engine(t)
	nodeImage := dockertest.NodeImage(t, engine, tideBin)
	ctx := context.Background()
	network := "tide-ssh-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if err := engine.CreateNetwork(ctx, network); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.RemoveNetwork(context.Background(), network) })
	gw, err := engine.NetworkGateway(ctx, network)
	if err != nil {
		t.Fatal(err)
	}
	in := startWith(t, t.TempDir(), net.JoinHostPort(gw, "0"), "", func(c *config.Server) {
		c.Locations = append(c.Locations, config.Location{Name: "containers", Provider: "docker",
			Settings: map[string]any{"image": nodeImage, "agent_binary": tideBin, "grace_period": "3s"}})
	})
	t.Cleanup(func() { cleanup(t, in) })
	c := newSSHClient(t, in)
	createCompute(t, in, "name: dock-ssh\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: containers\nmin_instances: 1\nmax_instances: 1\nnetwork_settings:\n  vnet_name: "+network+"\nssh_settings:\n  admin_username: alice\n  ssh_key_value: "+c.pub+"\n")
	var node string
	waitFor(t, "the container node idle", 120*time.Second, func() bool {
		ns, err := in.client.Nodes(ctx, "default", "dock-ssh")
		if err == nil && len(ns) == 1 && ns[0].State == api.NodeIdle {
			node = ns[0].ID
			return true
		}
		return false
	})
	out, err := c.run("dock-ssh", node, "alice", "echo container $(hostname) node $TIDE_NODE_ID")
	if err != nil || !strings.Contains(out, "node "+node) {
		t.Fatalf("ssh into the container: %v\n%s", err, out)
	}
	nodes, _ := in.client.Nodes(ctx, "default", "dock-ssh")
	if h := strings.Fields(out); len(nodes) != 1 || !strings.HasPrefix(nodes[0].ProviderID, "container:") || len(h) < 2 {
		t.Fatalf("node %+v; output %q", nodes, out)
	}
	// The admin_username is the only user name accepted.
	if out, err := c.run("dock-ssh", node, "root", "echo in"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("ssh as another user: %v\n%s", err, out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
