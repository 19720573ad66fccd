package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
)

// sshOpen serves one SSH connection the server asked for: it dials the
// server back (the tunnel rides the connection an agent may always open,
// so it works behind NAT, in containers and in pods) and runs an SSH
// server on it that accepts only the credentials in open.
func (a *agent) sshOpen(ctx context.Context, open api.SSHOpen) {
	log := a.log.With(slog.String("ssh", open.ID))
	conn, err := a.dialSSH(ctx, open.Replica, open.ID)
	if err != nil {
		log.WarnContext(ctx, "ssh: dialing the server back", slog.Any("error", err))
		return
	}
	defer conn.Close()
	signer, err := a.hostKey()
	if err != nil {
		log.ErrorContext(ctx, "ssh: host key", slog.Any("error", err))
		return
	}
	cfg := sshServerConfig(open, signer)
	sc, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		log.InfoContext(ctx, "ssh: handshake failed", slog.Any("error", err))
		return
	}
	defer sc.Close()
	a.ssh.add(1)
	defer a.ssh.add(-1)
	log.InfoContext(ctx, "ssh: connected", slog.String("user", sc.User()))
	// The agent stopping ends the session.
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	defer stop()
	go ssh.DiscardRequests(reqs)
	s := &sshServer{a: a, log: log}
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go s.session(ctx, ch, creqs)
		case "direct-tcpip":
			go s.forward(nc)
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "tide's SSH server offers sessions and local port forwarding (-L) only")
		}
	}
	log.InfoContext(ctx, "ssh: disconnected")
}

// sshServerConfig accepts the compute's keys and password, and its user
// name when it names one (a cluster's admin_username).
func sshServerConfig(open api.SSHOpen, signer ssh.Signer) *ssh.ServerConfig {
	var keys [][]byte
	for _, line := range open.AuthorizedKeys {
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
			keys = append(keys, k.Marshal())
		}
	}
	userOK := func(m ssh.ConnMetadata) error {
		if open.User != "" && m.User() != open.User {
			return fmt.Errorf("log in as %s (ssh_settings.admin_username), not %s", open.User, m.User())
		}
		return nil
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(m ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if err := userOK(m); err != nil {
				return nil, err
			}
			got := key.Marshal()
			for _, k := range keys {
				if subtle.ConstantTimeCompare(k, got) == 1 {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, errors.New("key not in ssh_settings.ssh_key_value")
		},
		ServerVersion: "SSH-2.0-tide",
	}
	if open.Password != "" {
		cfg.PasswordCallback = func(m ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if err := userOK(m); err != nil {
				return nil, err
			}
			if subtle.ConstantTimeCompare(pw, []byte(open.Password)) == 1 {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("wrong password")
		}
	}
	cfg.AddHostKey(signer)
	return cfg
}

// dialSSH opens GET /v1/agent/ssh/ID, at the replica where the client
// waits, upgraded to a raw connection. The connection lives until it is
// closed or ctx ends.
func (a *agent) dialSSH(ctx context.Context, replica, id string) (net.Conn, error) {
	cctx, cancel := context.WithCancel(ctx)
	req, err := a.client.newRequestAt(cctx, a.client.baseFor(replica), http.MethodGet, "/v1/agent/ssh/"+id, nil, "")
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.SSHUpgrade)
	slow := time.AfterFunc(30*time.Second, cancel)
	resp, err := a.client.hc.Do(req)
	slow.Stop()
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		return nil, &statusError{Code: resp.StatusCode, Body: string(b)}
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		cancel()
		return nil, errors.New("the HTTP client cannot write to an upgraded connection")
	}
	return &streamConn{ReadWriteCloser: rwc, cancel: cancel}, nil
}

// hostKey is the node's SSH host key, made on first use and kept in the
// node folder (so an instance keeps it across stop and start).
func (a *agent) hostKey() (ssh.Signer, error) {
	path := filepath.Join(a.cfg.Dir, ".tide", "ssh_host_ed25519_key")
	if b, err := os.ReadFile(path); err == nil {
		return ssh.ParsePrivateKey(b)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, a.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("keeping the SSH host key: %w", err)
	}
	return ssh.NewSignerFromKey(priv)
}

// sshCount counts open SSH connections, and the most open at once since
// the last report: a session shorter than a heartbeat still counts.
type sshCount struct {
	mu         sync.Mutex
	open, peak int
}

func (c *sshCount) add(d int) {
	c.mu.Lock()
	c.open += d
	c.peak = max(c.peak, c.open)
	c.mu.Unlock()
}

// report returns the most connections open at once since the last report.
func (c *sshCount) report() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peak
	c.peak = c.open
	return p
}

// streamConn is a net.Conn over an upgraded HTTP body, which has no
// addresses or deadlines of its own.
type streamConn struct {
	io.ReadWriteCloser
	cancel context.CancelFunc
}

func (c *streamConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.cancel()
	return err
}

type tunnelAddr struct{}

func (tunnelAddr) Network() string { return "tide" }
func (tunnelAddr) String() string  { return "tide-server" }

func (c *streamConn) LocalAddr() net.Addr              { return tunnelAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return tunnelAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// envAllowed are the variables a client may pass (ssh's SendEnv): locale
// and terminal, as OpenSSH's default AcceptEnv.
func envAllowed(k string) bool {
	return k == "LANG" || k == "LANGUAGE" || k == "TERM" || k == "COLORTERM" || strings.HasPrefix(k, "LC_")
}
