package freeport

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKernelNeverHandsOutOurPorts: the premise. Listeners on port 0 and
// outgoing connections (what took Azurite's port in the session-36 CI
// run) get ports of the ephemeral range, never one Get hands out.
func TestKernelNeverHandsOutOurPorts(t *testing.T) {
	lo, hi, ok := ownRange()
	if !ok {
		t.Skip("no ephemeral range to stay below")
	}
	port, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	if port < lo || port >= hi {
		t.Fatalf("Get: %d, not in [%d, %d)", port, lo, hi)
	}
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range 2000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, l)
		if p := l.Addr().(*net.TCPAddr).Port; p >= lo && p < hi {
			t.Fatalf("the kernel handed out %d, in Get's range [%d, %d)", p, lo, hi)
		}
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if p := c.LocalAddr().(*net.TCPAddr).Port; p >= lo && p < hi {
			t.Fatalf("an outgoing connection got %d, in Get's range [%d, %d)", p, lo, hi)
		}
	}
}

// TestPortsAreFreeAndNotShared: a port is bindable when handed out, and
// neither this process nor another one gets it again while it is held.
func TestPortsAreFreeAndNotShared(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") == "1" {
		var out []string
		for range 200 {
			p, err := Get()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strconv.Itoa(p))
		}
		os.WriteFile(os.Getenv("FREEPORT_OUT"), []byte(strings.Join(out, "\n")), 0o644)
		return
	}
	if _, _, ok := ownRange(); !ok {
		t.Skip("no ephemeral range to stay below")
	}
	mine := map[int]bool{}
	for range 200 {
		p, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if mine[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		mine[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d handed out but not free: %v", p, err)
		}
		l.Close()
	}
	// Another process, while this one holds its ports.
	outf := filepath.Join(t.TempDir(), "ports")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortsAreFreeAndNotShared$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1", "FREEPORT_OUT="+outf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, err := os.ReadFile(outf)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(s)
		if mine[p] {
			t.Fatalf("port %d handed out to this process and to another", p)
		}
	}
}

// TestABusyPortIsSkipped: a port a program not using this package
// listens on is not handed out.
func TestABusyPortIsSkipped(t *testing.T) {
	lo, _, ok := ownRange()
	if !ok {
		t.Skip("no ephemeral range to stay below")
	}
	var busy *net.TCPAddr
	for p := lo; busy == nil; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			defer l.Close()
			busy = l.Addr().(*net.TCPAddr)
		}
	}
	if free(busy.Port) {
		t.Fatalf("port %d reported free while a listener has it", busy.Port)
	}
}

// TestAPortInTimeWaitIsSkipped: a port whose last connection is in
// TIME_WAIT is free to Go's servers (SO_REUSEADDR) but not to a program
// that binds without it, so it is not handed out.
func TestAPortInTimeWaitIsSkipped(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// The server side closes first: its end (on port) goes to TIME_WAIT.
	s.Close()
	buf := make([]byte, 1)
	c.Read(buf)
	c.Close()
	l.Close()
	if free(port) {
		t.Fatalf("port %d reported free while its connection is in TIME_WAIT", port)
	}
}
