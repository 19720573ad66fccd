package agent

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
)

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
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

// TestSSHAuthRules: the node's SSH server accepts exactly the compute's
// keys, its password when it has one, and only its admin_username when it
// names one (a real SSH handshake per case).
func TestSSHAuthRules(t *testing.T) {
	host, alice, mallory := newSigner(t), newSigner(t), newSigner(t)
	aliceKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(alice.PublicKey()))) + " alice@laptop"
	instance := api.SSHOpen{AuthorizedKeys: []string{"not a key", aliceKey}}
	cluster := api.SSHOpen{AuthorizedKeys: []string{aliceKey}, User: "example-user", Password: "example-password"}
	for _, tt := range []struct {
		name string
		open api.SSHOpen
		user string
		auth ssh.AuthMethod
		ok   bool
	}{
		{"instance: the key", instance, "azureuser", ssh.PublicKeys(alice), true},
		{"instance: any user name", instance, "bob", ssh.PublicKeys(alice), true},
		{"instance: another key", instance, "azureuser", ssh.PublicKeys(mallory), false},
		{"instance: no password set", instance, "azureuser", ssh.Password(""), false},
		{"cluster: the key as admin_username", cluster, "example-user", ssh.PublicKeys(alice), true},
		{"cluster: the key as another user", cluster, "root", ssh.PublicKeys(alice), false},
		{"cluster: the password", cluster, "example-user", ssh.Password("example-password"), true},
		{"cluster: a wrong password", cluster, "example-user", ssh.Password("guess"), false},
		{"cluster: the password as another user", cluster, "root", ssh.Password("example-password"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A real connection: both sides write their version first,
			// which a synchronous net.Pipe would deadlock on.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			b, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			a, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			defer b.Close()
			srvErr := make(chan error, 1)
			go func() {
				sc, chans, reqs, err := ssh.NewServerConn(a, sshServerConfig(tt.open, host))
				if err == nil {
					go ssh.DiscardRequests(reqs)
					go func() {
						for nc := range chans {
							_ = nc.Reject(ssh.Prohibited, "test")
						}
					}()
					sc.Close()
				}
				a.Close()
				srvErr <- err
			}()
			cc, _, _, err := ssh.NewClientConn(b, "node", &ssh.ClientConfig{
				User: tt.user, Auth: []ssh.AuthMethod{tt.auth},
				HostKeyCallback: ssh.FixedHostKey(host.PublicKey()),
			})
			if cc != nil {
				cc.Close()
			}
			b.Close()
			serr := <-srvErr
			if (err == nil) != tt.ok || (serr == nil) != tt.ok {
				t.Fatalf("client error %v, server error %v; want success %v", err, serr, tt.ok)
			}
		})
	}
}
