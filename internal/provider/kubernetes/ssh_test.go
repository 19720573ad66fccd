package kubernetes_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/server/servertest"
)

// TestSSHIntoPod: a node in a Pod runs the same agent, so SSH reaches it
// like any node: through the tide server's tunnel (no port opened on the
// Pod), checked against the host key its agent reported, accepting the
// compute's key as its admin_username and refusing another key.
func TestSSHIntoPod(t *testing.T) {
	c := requireCluster(t)
	srv, _ := c.startServer(t)
	defer func() { srv.Shutdown() }()
	dumped := false
	dump := func() {
		if t.Failed() && !dumped {
			dumped = true
			c.dump(t, srv, "pod-ssh")
		}
	}
	defer dump()
	alice, mallory := newSigner(t), newSigner(t)
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(alice.PublicKey())))
	srv.PutCompute("name: pod-ssh\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 1\nidle_time_before_scale_down: 600\n" +
		"ssh_settings:\n  admin_username: alice\n  ssh_key_value: " + key + "\n")

	var node api.Node
	if !servertest.Poll(t.Context(), 90*time.Second, func() bool {
		ns, _ := srv.Client.Nodes(t.Context(), "default", "pod-ssh")
		if len(ns) == 1 && ns[0].State == api.NodeIdle && ns[0].SSHHostKey != "" {
			node = ns[0]
			return true
		}
		return false
	}) {
		t.Fatalf("no idle node with a host key on compute pod-ssh")
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(node.SSHHostKey))
	if err != nil {
		t.Fatalf("node %s's host key %q: %v", node.ID, node.SSHHostKey, err)
	}
	dial := func(user string, signer ssh.Signer) (*ssh.Client, error) {
		tunnel, err := srv.Client.SSHTunnel(t.Context(), "default", "pod-ssh", node.ID)
		if err != nil {
			return nil, err
		}
		conn, chans, reqs, err := ssh.NewClientConn(tunnel, node.ID, &ssh.ClientConfig{
			User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 30 * time.Second,
		})
		if err != nil {
			tunnel.Close()
			return nil, err
		}
		return ssh.NewClient(conn, chans, reqs), nil
	}

	// A node is idle once its agent registered; its stream to the server,
	// which SSH goes through, may connect a moment later.
	var cl *ssh.Client
	servertest.Poll(t.Context(), 30*time.Second, func() bool {
		cl, err = dial("alice", alice)
		return err == nil || !strings.Contains(err.Error(), "is not connected to this server")
	})
	if err != nil {
		t.Fatalf("ssh alice@%s with the compute's key: %v", node.ID, err)
	}
	defer cl.Close()
	sess, err := cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.CombinedOutput("echo in the pod as node $TIDE_NODE_ID; exit 3")
	var exit *ssh.ExitError
	if !strings.Contains(string(out), "in the pod as node "+node.ID) || !asExit(err, &exit) || exit.ExitStatus() != 3 {
		t.Errorf("a command over ssh: %q, %v; want the node's id and exit status 3", out, err)
	}
	for _, tc := range []struct {
		user   string
		signer ssh.Signer
	}{{"alice", mallory}, {"root", alice}} {
		cl, err := dial(tc.user, tc.signer)
		if err == nil {
			cl.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
			t.Errorf("ssh %s@%s with key %s: %v; want refused (unable to authenticate)", tc.user, node.ID, ssh.FingerprintSHA256(tc.signer.PublicKey()), err)
		}
	}
	dump() // while the pod and its agent's output are there
	srv.DeleteCompute("pod-ssh", 60*time.Second)
}

func newSigner(t *testing.T) ssh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func asExit(err error, target **ssh.ExitError) bool {
	e, ok := err.(*ssh.ExitError)
	*target = e
	return ok
}
