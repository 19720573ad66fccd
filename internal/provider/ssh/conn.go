package ssh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// idleTimeout is how long an unused connection to a host stays open.
const idleTimeout = 30 * time.Second

// remote is one host with the ssh settings to reach it, and the
// connection to it, shared by the calls in flight and closed when idle.
type remote struct {
	Host
	config *xssh.ClientConfig

	mu       sync.Mutex
	client   *xssh.Client
	inflight int
	idle     *time.Timer
	// down is set while the host is unreachable: calls fail at once with
	// it (the controller's loop must not wait on a dead host at every
	// turn) while a background probe waits for the host to come back.
	down error
	// detectedGPUs are the GPUs the host reported, once gpusDetected.
	gpusDetected bool
	detectedGPUs []string
}

// maxProbeWait bounds the wait between two probes of a host that is down.
const maxProbeWait = 10 * time.Second

// newRemote prepares the client configuration of h: the host key check
// (pinned key or known_hosts, never none) and the login method.
func newRemote(h Host, knownHostsFile string) (*remote, error) {
	cfg, err := loginConfig(h)
	if err != nil {
		return nil, err
	}
	if h.HostKey != "" {
		pub, _, _, _, err := xssh.ParseAuthorizedKey([]byte(h.HostKey))
		if err != nil {
			return nil, fmt.Errorf("host_key: must be a public key in authorized_keys format (%v)", err)
		}
		cfg.HostKeyCallback = pinnedKey(pub)
		// Ask for the pinned key's type, so a host with several keys
		// shows the one we can check.
		cfg.HostKeyAlgorithms = algorithmsFor(pub.Type())
	} else {
		cb, err := knownhosts.New(knownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
		cfg.HostKeyCallback = cb
		algos, err := knownAlgorithms(cb, h)
		if err != nil {
			return nil, err
		}
		if len(algos) == 0 {
			return nil, fmt.Errorf("address: %s is not in known_hosts %s; add its key (ssh-keyscan -p %d %s >> %s) or pin host_key",
				net.JoinHostPort(h.Address, strconv.Itoa(h.Port)), knownHostsFile, h.Port, h.Address, knownHostsFile)
		}
		cfg.HostKeyAlgorithms = algos
	}
	return &remote{Host: h, config: cfg}, nil
}

// HostKeyError means a host showed another host key than the one pinned:
// the machine was replaced or reinstalled, or someone is in between.
type HostKeyError struct {
	// Want and Got are the pinned key's and the shown key's SHA256
	// fingerprints.
	Want, Got string
}

func (e *HostKeyError) Error() string {
	return fmt.Sprintf("the host key changed: the host shows %s, not the pinned %s (if the machine was reinstalled, pin its new key; otherwise someone may be intercepting the connection)", e.Got, e.Want)
}

// pinnedKey accepts only want, failing with a *HostKeyError.
func pinnedKey(want xssh.PublicKey) xssh.HostKeyCallback {
	return func(_ string, _ net.Addr, got xssh.PublicKey) error {
		if bytes.Equal(got.Marshal(), want.Marshal()) {
			return nil
		}
		return &HostKeyError{Want: xssh.FingerprintSHA256(want), Got: xssh.FingerprintSHA256(got)}
	}
}

// loginConfig is the client configuration of h without its host key
// check: the user and the login method.
func loginConfig(h Host) (*xssh.ClientConfig, error) {
	cfg := &xssh.ClientConfig{User: h.User}
	key := h.PrivateKey
	if key == nil && h.KeyFile != "" {
		b, err := os.ReadFile(h.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
		key = b
	}
	if key != nil {
		signer, err := xssh.ParsePrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("key_file %s: %w (tide needs an unencrypted key, or an ssh-agent)", h.KeyFile, err)
		}
		cfg.Auth = []xssh.AuthMethod{xssh.PublicKeys(signer)}
		return cfg, nil
	}
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
	return cfg, nil
}

// knownAlgorithms returns the host key algorithms of the keys known_hosts
// lists for h, so the handshake asks for a key tide can check (a host with
// ed25519 and ecdsa keys, of which known_hosts lists one, would otherwise
// fail with a mismatch). It asks the callback about a throwaway key: the
// KeyError lists the known ones.
func knownAlgorithms(cb xssh.HostKeyCallback, h Host) ([]string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	probe, err := xssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(h.Address, strconv.Itoa(h.Port))
	err = cb(addr, &net.TCPAddr{IP: net.IPv4zero, Port: h.Port}, probe)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil, fmt.Errorf("known_hosts: checking %s: %v", addr, err)
	}
	var algos []string
	for _, k := range ke.Want {
		for _, a := range algorithmsFor(k.Key.Type()) {
			if !slices.Contains(algos, a) {
				algos = append(algos, a)
			}
		}
	}
	return algos, nil
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
// standard output. Calls share one connection; a call that exceeds its
// timeout closes it (a host cut off fails the calls in flight, and the
// next call dials again). A host that cannot be reached is marked down:
// calls fail at once until a background probe reaches it again.
func (r *remote) run(ctx context.Context, timeout time.Duration, script string, stdin io.Reader) ([]byte, error) {
	r.mu.Lock()
	down := r.down
	r.mu.Unlock()
	if down != nil {
		return nil, down
	}
	out, err := r.try(ctx, timeout, script, stdin)
	var ue *UnreachableError
	if errors.As(err, &ue) && ctx.Err() == nil {
		r.markDown(ue, timeout)
	}
	return out, err
}

func (r *remote) try(ctx context.Context, timeout time.Duration, script string, stdin io.Reader) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		c, fresh, err := r.acquire(ctx)
		if err != nil {
			return nil, &UnreachableError{Host: r.name(), Err: err}
		}
		out, started, err := r.session(ctx, c, script, stdin)
		r.release()
		if err != nil && !started && !fresh && attempt == 0 && ctx.Err() == nil {
			continue // a connection that died while idle: dial again
		}
		if err != nil && ctx.Err() != nil {
			err = &UnreachableError{Host: r.name(), Err: fmt.Errorf("%w after %s", ctx.Err(), timeout)}
		}
		return out, err
	}
}

// markDown records that the host is unreachable and starts the probe.
func (r *remote) markDown(err *UnreachableError, timeout time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down != nil {
		return
	}
	r.down = &UnreachableError{Host: r.name(), Err: fmt.Errorf("%w (unreachable since %s; tide retries in the background)",
		err.Err, time.Now().UTC().Format(time.RFC3339))}
	go r.probe(timeout)
}

// probe dials the host, waiting longer after each failure, until it
// answers; then calls go through again.
func (r *remote) probe(timeout time.Duration) {
	wait := 500 * time.Millisecond
	for {
		time.Sleep(wait)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		c, err := r.dial(ctx)
		cancel()
		if err == nil {
			c.Close()
			r.mu.Lock()
			r.down = nil
			r.mu.Unlock()
			return
		}
		wait = min(2*wait, maxProbeWait)
	}
}

// session runs script in a new session of c; started reports whether the
// command was sent (after which a retry could run it twice).
func (r *remote) session(ctx context.Context, c *xssh.Client, script string, stdin io.Reader) (out []byte, started bool, err error) {
	stop := context.AfterFunc(ctx, func() { r.drop(c) })
	defer stop()
	sess, err := c.NewSession()
	if err != nil {
		r.drop(c)
		return nil, false, &UnreachableError{Host: r.name(), Err: err}
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, &stdout, &stderr
	if err := sess.Run("sh -c " + quote(script)); err != nil {
		var exit *xssh.ExitError
		if errors.As(err, &exit) {
			return stdout.Bytes(), true, fmt.Errorf("host %s: %s (exit status %d)", r.name(), strings.TrimSpace(stderr.String()), exit.ExitStatus())
		}
		r.drop(c)
		return stdout.Bytes(), true, &UnreachableError{Host: r.name(), Err: err}
	}
	return stdout.Bytes(), true, nil
}

// acquire returns the host's connection, dialing it if there is none;
// fresh reports a new one. Every acquire is paired with a release.
func (r *remote) acquire(ctx context.Context) (c *xssh.Client, fresh bool, err error) {
	r.mu.Lock()
	r.inflight++
	c = r.client
	r.mu.Unlock()
	if c != nil {
		return c, false, nil
	}
	c, err = r.dial(ctx)
	if err != nil {
		r.release()
		return nil, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil { // another call dialed meanwhile
		c.Close()
		return r.client, false, nil
	}
	r.client = c
	return c, true, nil
}

// release ends a call; the last one arms the idle timer.
func (r *remote) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if r.inflight > 0 || r.client == nil {
		return
	}
	if r.idle != nil {
		r.idle.Stop()
	}
	c := r.client
	r.idle = time.AfterFunc(idleTimeout, func() {
		r.mu.Lock()
		idle := r.inflight == 0 && r.client == c
		r.mu.Unlock()
		if idle {
			r.drop(c)
		}
	})
}

// drop closes c and forgets it if it is the host's connection.
func (r *remote) drop(c *xssh.Client) {
	r.mu.Lock()
	if r.client == c {
		r.client = nil
	}
	r.mu.Unlock()
	c.Close()
}

// dial connects and logs in, within ctx's deadline.
func (r *remote) dial(ctx context.Context) (*xssh.Client, error) {
	addr := net.JoinHostPort(r.Address, strconv.Itoa(r.Port))
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	c, chans, reqs, err := xssh.NewClientConn(conn, addr, r.config)
	if !stop() || err != nil {
		conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	// The deadline was for the handshake; calls bound themselves.
	_ = conn.SetDeadline(time.Time{})
	return xssh.NewClient(c, chans, reqs), nil
}

// quote quotes s for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
