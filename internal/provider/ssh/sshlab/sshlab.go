// Package sshlab runs real sshd "hosts" for tests, each in its own network
// namespace (it needs root, ip, setsid and /usr/sbin/sshd): the ssh
// provider's tests and the server's tests of attached machines use it.
package sshlab

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Lab is a set of real sshd "hosts", each in its own network namespace
// joined to this one by a veth pair: the root end is 198.18.N.1, the host
// end 198.18.N.2, and each namespace routes everything through the root
// end, so agents there reach a server listening on any root-end address.
type Lab struct {
	// Dir holds the lab's files; ClientKey is the private key file every
	// host accepts for root.
	Dir       string
	ClientKey string
	Hosts     []*Host
	subnets   []*os.File // the locks on the hosts' subnets, held until Close
}

// Host is one sshd in its own network namespace.
type Host struct {
	NS, Veth string // namespace, root end of the veth pair
	RootIP   string // the root end's address
	IP       string // the host's address
	HostKey  string // sshd's public key, authorized_keys format
	sshd     *exec.Cmd
}

// Missing says what the machine lacks to build a lab, or "".
func Missing() string {
	if os.Geteuid() != 0 {
		return "not root (network namespaces need it)"
	}
	for _, bin := range []string{"/usr/sbin/sshd", "ip", "setsid", "sha256sum"} {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " not found (apt-get install openssh-server iproute2)"
		}
	}
	return ""
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// New starts n hosts; Close removes them.
func New(n int) (_ *Lab, err error) {
	dir, err := os.MkdirTemp("", "tide-sshlab-")
	if err != nil {
		return nil, err
	}
	l := &Lab{Dir: dir}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	// sshd insists on its privilege separation folder.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	pub, err := WriteKey(filepath.Join(dir, "client_key"))
	if err != nil {
		return nil, err
	}
	l.ClientKey = filepath.Join(dir, "client_key")
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), xssh.MarshalAuthorizedKey(pub), 0o600); err != nil {
		return nil, err
	}
	// Names carry the pid and a counter, so labs of one process or of two
	// never share a namespace or an interface.
	id := fmt.Sprintf("%d%c", os.Getpid()%100000, 'a'+rune(labs.Add(1)%26))
	for i := range n {
		// 198.18.0.0/15 is reserved for network tests (RFC 2544), so the
		// lab never shadows a route of the machine's own networks; each
		// host's /24 is locked while it lives, so two tests running at
		// once (the SQLite and PostgreSQL passes) never share one.
		octet, lock, err := claimSubnet()
		if err != nil {
			return nil, err
		}
		l.subnets = append(l.subnets, lock)
		h := &Host{
			NS: fmt.Sprintf("tide%sh%d", id, i), Veth: fmt.Sprintf("tv%sh%d", id, i),
			RootIP: fmt.Sprintf("198.18.%d.1", octet), IP: fmt.Sprintf("198.18.%d.2", octet),
		}
		l.Hosts = append(l.Hosts, h)
		peer := fmt.Sprintf("tp%sh%d", id, i)
		for _, cmd := range [][]string{
			{"netns", "add", h.NS},
			{"link", "add", h.Veth, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", h.NS},
			{"addr", "add", h.RootIP + "/24", "dev", h.Veth},
			{"link", "set", h.Veth, "up"},
			{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", peer},
			{"-n", h.NS, "link", "set", peer, "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", h.NS, "route", "add", "default", "via", h.RootIP},
		} {
			if err := run("ip", cmd...); err != nil {
				return nil, err
			}
		}
		hdir := filepath.Join(dir, h.NS)
		if err := os.Mkdir(hdir, 0o755); err != nil {
			return nil, err
		}
		hpub, err := WriteKey(filepath.Join(hdir, "host_key"))
		if err != nil {
			return nil, err
		}
		h.HostKey = strings.TrimSpace(string(xssh.MarshalAuthorizedKey(hpub)))
		// A second host key, which known_hosts and host_key do not list:
		// tide must ask for the key it knows.
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		block, err := xssh.MarshalPrivateKey(ec, "")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(hdir, "host_key_ecdsa"), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf(`ListenAddress %s
Port 22
HostKey %s/host_key_ecdsa
HostKey %s/host_key
AuthorizedKeysFile %s/authorized_keys
PidFile %s/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
`, h.IP, hdir, hdir, dir, hdir)
		if err := os.WriteFile(filepath.Join(hdir, "sshd_config"), []byte(conf), 0o600); err != nil {
			return nil, err
		}
		h.sshd = exec.Command("ip", "netns", "exec", h.NS, "/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(hdir, "sshd_config"))
		logf, err := os.Create(filepath.Join(hdir, "sshd.log"))
		if err != nil {
			return nil, err
		}
		h.sshd.Stdout, h.sshd.Stderr = logf, logf
		if err := h.sshd.Start(); err != nil {
			return nil, fmt.Errorf("starting sshd: %w", err)
		}
		logf.Close()
	}
	for _, h := range l.Hosts {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", h.IP+":22", time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(dir, h.NS, "sshd.log"))
				return nil, fmt.Errorf("sshd on %s did not start: %v\n%s", h.IP, err, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return l, nil
}

// Close stops the sshds and removes the namespaces (which removes the veths).
func (l *Lab) Close() {
	for _, h := range l.Hosts {
		if h.sshd != nil && h.sshd.Process != nil {
			_ = h.sshd.Process.Kill()
			_ = h.sshd.Wait()
		}
		_ = run("ip", "link", "del", h.Veth)
		_ = run("ip", "netns", "del", h.NS)
	}
	os.RemoveAll(l.Dir)
	for _, f := range l.subnets {
		f.Close()
	}
}

var labs atomic.Int32

// subnetInUse says whether an interface here has an address in
// 198.18.n.0/24: a lab of a process killed before its Close leaves its
// veth behind, and a second route to the subnet would take the new lab's
// packets there.
func subnetInUse(n int) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	_, subnet, _ := net.ParseCIDR(fmt.Sprintf("198.18.%d.0/24", n))
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && subnet.Contains(ipn.IP) {
			return true
		}
	}
	return false
}

// claimSubnet locks one of the 256 subnets 198.18.N.0/24 for this process
// (a lock file per subnet; the lock goes with the process, however it ends).
func claimSubnet() (int, *os.File, error) {
	dir := filepath.Join(os.TempDir(), "tide-sshlab-subnets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, err
	}
	start := os.Getpid() * 7
	for k := range 256 {
		n := (start + k) % 256
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return 0, nil, err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if !subnetInUse(n) {
				return n, f, nil
			}
		}
		f.Close()
	}
	return 0, nil, fmt.Errorf("every subnet 198.18.0-255.0/24 is held by another lab (see %s)", dir)
}

// Cut takes host i off the network (true) or brings it back (false).
func (l *Lab) Cut(i int, off bool) error {
	state := "up"
	if off {
		state = "down"
	}
	return run("ip", "link", "set", l.Hosts[i].Veth, state)
}

// Freeze stops host i's sshd (true: SIGSTOP) or lets it go on (false):
// a new connection's TCP handshake completes but no ssh banner follows, as
// on a host too loaded to answer, so a dial waits out its whole timeout.
// Connections made before keep working (their sshd processes run on).
func (l *Lab) Freeze(i int, frozen bool) error {
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	return l.Hosts[i].sshd.Process.Signal(sig)
}

// KnownHosts writes a known_hosts file listing every host.
func (l *Lab) KnownHosts() (string, error) {
	var b strings.Builder
	for _, h := range l.Hosts {
		pub, _, _, _, err := xssh.ParseAuthorizedKey([]byte(h.HostKey))
		if err != nil {
			return "", err
		}
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(h.IP + ":22")}, pub) + "\n")
	}
	path := filepath.Join(l.Dir, "known_hosts")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// WriteKey writes a new ed25519 private key in OpenSSH format to path.
func WriteKey(path string) (xssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := xssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return xssh.NewPublicKey(pub)
}
