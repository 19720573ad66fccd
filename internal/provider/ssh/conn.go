package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// UnreachableError means tide could not log in to a host (network, sshd,
// host key or authentication); the node's state there is unknown.
type UnreachableError struct {
	Host string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("host %s: %v", e.Host, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// remote is one host with the ssh settings to reach it.
type remote struct {
	Host
	config *xssh.ClientConfig
}

// newRemote prepares the client configuration of h: the host key check
// (pinned key or known_hosts, never none) and the login method.
func newRemote(h Host, knownHostsFile string) (*remote, error) {
	cfg := &xssh.ClientConfig{User: h.User}
	if h.HostKey != "" {
		pub, _, _, _, err := xssh.ParseAuthorizedKey([]byte(h.HostKey))
		if err != nil {
			return nil, fmt.Errorf("host_key: must be a public key in authorized_keys format (%v)", err)
		}
		cfg.HostKeyCallback = xssh.FixedHostKey(pub)
		// Ask for the pinned key's type, so a host with several keys
		// shows the one we can check.
		cfg.HostKeyAlgorithms = algorithmsFor(pub.Type())
	} else {
		cb, err := knownhosts.New(knownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
		cfg.HostKeyCallback = cb
	}
	if h.KeyFile != "" {
		b, err := os.ReadFile(h.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
		signer, err := xssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("key_file %s: %w (tide needs an unencrypted key, or an ssh-agent)", h.KeyFile, err)
		}
		cfg.Auth = []xssh.AuthMethod{xssh.PublicKeys(signer)}
	} else {
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, errors.New("key_file: required when no ssh-agent runs (SSH_AUTH_SOCK is unset)")
		}
		cfg.Auth = []xssh.AuthMethod{xssh.PublicKeysCallback(func() ([]xssh.Signer, error) {
			conn, err := net.Dial("unix", sock)
			if err != nil {
				return nil, fmt.Errorf("ssh-agent at %s: %w", sock, err)
			}
			defer conn.Close()
			return sshagent.NewClient(conn).Signers()
		})}
	}
	return &remote{Host: h, config: cfg}, nil
}

func algorithmsFor(keyType string) []string {
	switch keyType {
	case xssh.KeyAlgoRSA:
		return []string{xssh.KeyAlgoRSASHA512, xssh.KeyAlgoRSASHA256, xssh.KeyAlgoRSA}
	default:
		return []string{keyType}
	}
}

// run runs script with sh on the host, feeding it stdin, and returns its
// standard output. A fresh connection per call keeps failures contained:
// a host cut off mid-call fails that call at its deadline, nothing else.
func (r *remote) run(ctx context.Context, timeout time.Duration, script string, stdin io.Reader) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(r.Address, strconv.Itoa(r.Port))
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &UnreachableError{Host: r.name(), Err: err}
	}
	defer conn.Close()
	// The deadline bounds the handshake and the command alike; closing
	// the connection on cancel unblocks everything.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, chans, reqs, err := xssh.NewClientConn(conn, addr, r.config)
	if err != nil {
		return nil, &UnreachableError{Host: r.name(), Err: err}
	}
	client := xssh.NewClient(c, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return nil, &UnreachableError{Host: r.name(), Err: err}
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, &stdout, &stderr
	if err := sess.Run("sh -c " + quote(script)); err != nil {
		var exit *xssh.ExitError
		if errors.As(err, &exit) {
			return stdout.Bytes(), fmt.Errorf("host %s: %s (exit status %d)", r.name(), strings.TrimSpace(stderr.String()), exit.ExitStatus())
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %s", ctx.Err(), timeout)
		}
		return stdout.Bytes(), &UnreachableError{Host: r.name(), Err: err}
	}
	return stdout.Bytes(), nil
}

// quote quotes s for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
