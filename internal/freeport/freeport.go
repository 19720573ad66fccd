// Package freeport hands tests TCP ports for servers that must be told
// their port before they bind it: programs the tests start (PostgreSQL,
// slurmctld, Prometheus, kube-apiserver, `tide server`) and servers
// restarted on the address they had.
//
// Asking the kernel for a free port (listen on port 0, close, pass the
// number on) races with everything else on the machine: the kernel hands
// the same ports out again, to other listeners on port 0 and to outgoing
// connections, so another test's server can take the port before the
// program binds it. The program then fails to start, or a foreign server
// answers in its place (the session-36 CI failure: "the service answered
// 404").
//
// The ports here come from below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), which the kernel never hands
// out by itself, and each is locked by the process that took it until
// that process exits (flock on a file in $TMPDIR/tide-ports), so two test
// processes never take the same one. A port is handed out once per
// process. Where the range cannot be read, or has no room below it, Get
// falls back to the kernel's choice.
package freeport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// span is how many ports below the ephemeral range Get uses.
const span = 10000

var (
	mu   sync.Mutex
	held []*os.File // the locks, kept open (and referenced) until exit
)

// Get returns a TCP port that is free on every local address and that
// no other process using this package holds.
func Get() (int, error) {
	lo, hi, ok := ownRange()
	if !ok {
		return kernelPort()
	}
	dir := filepath.Join(os.TempDir(), "tide-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky) // shared by every user's tests
	mu.Lock()
	defer mu.Unlock()
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		f, ok := lock(filepath.Join(dir, strconv.Itoa(port)))
		if !ok {
			continue
		}
		if !free(port) {
			f.Close() // releases the lock
			continue
		}
		held = append(held, f)
		return port, nil
	}
	return 0, fmt.Errorf("free port: none free in %d-%d", lo, hi-1)
}

// For returns a port as Get does, and fails t when there is none.
func For(t testing.TB) int {
	t.Helper()
	p, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ownRange returns [lo, hi), the ports below the kernel's ephemeral range.
func ownRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	eph, err := strconv.Atoi(f[0])
	if err != nil || eph-span < 1024 {
		return 0, 0, false
	}
	return eph - span, eph, true
}

// lock takes the lock file of a port, or reports false when another
// process (or another Get of this one) holds it.
func lock(path string) (*os.File, bool) {
	// Read-only: another user's test may have made the file (0644 after
	// its umask), and flock needs no write access.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// free reports whether port can be bound on every IPv4 address (so on
// 127.0.0.1 too) right now, even by a program that does not set
// SO_REUSEADDR (Go does): a connection of a previous owner still in
// TIME_WAIT makes it not free.
func free(port int) bool {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 0)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	l, err := lc.Listen(context.Background(), "tcp4", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// kernelPort is the fallback: a port the kernel says is free now.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
