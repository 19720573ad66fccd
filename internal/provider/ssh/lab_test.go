package ssh_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// lab is a set of real sshd "hosts", each in its own network namespace
// joined to this one by a veth pair: the root end is 198.18.N.1, the host
// end 198.18.N.2, and each namespace routes everything through the root
// end, so agents there reach a server listening on any root-end address.
type lab struct {
	dir       string
	clientKey string // private key file tide logs in with
	hosts     []*labHost
}

type labHost struct {
	ns, veth string // namespace, root end of the veth pair
	rootIP   string // the root end's address
	ip       string // the host's address
	hostKey  string // sshd's public key, authorized_keys format
	sshd     *exec.Cmd
}

// labMissing says what the machine lacks to build a lab, or "".
func labMissing() string {
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

// newLab starts n hosts.
func newLab(n int) (_ *lab, err error) {
	dir, err := os.MkdirTemp("", "tide-sshlab-")
	if err != nil {
		return nil, err
	}
	l := &lab{dir: dir}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	// sshd insists on its privilege separation folder.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	pub, err := writeKey(filepath.Join(dir, "client_key"))
	if err != nil {
		return nil, err
	}
	l.clientKey = filepath.Join(dir, "client_key")
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), xssh.MarshalAuthorizedKey(pub), 0o600); err != nil {
		return nil, err
	}
	id := os.Getpid() % 100000
	// 198.18.0.0/15 is reserved for network tests (RFC 2544), so the lab
	// never shadows a route of the machine's own networks; the pid keeps
	// two test processes apart.
	octet := os.Getpid() % 100 * 2
	for i := range n {
		h := &labHost{
			ns: fmt.Sprintf("tide%dh%d", id, i), veth: fmt.Sprintf("tv%dh%d", id, i),
			rootIP: fmt.Sprintf("198.18.%d.1", octet+i), ip: fmt.Sprintf("198.18.%d.2", octet+i),
		}
		l.hosts = append(l.hosts, h)
		peer := fmt.Sprintf("tp%dh%d", id, i)
		for _, cmd := range [][]string{
			{"netns", "add", h.ns},
			{"link", "add", h.veth, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", h.ns},
			{"addr", "add", h.rootIP + "/24", "dev", h.veth},
			{"link", "set", h.veth, "up"},
			{"-n", h.ns, "addr", "add", h.ip + "/24", "dev", peer},
			{"-n", h.ns, "link", "set", peer, "up"},
			{"-n", h.ns, "link", "set", "lo", "up"},
			{"-n", h.ns, "route", "add", "default", "via", h.rootIP},
		} {
			if err := run("ip", cmd...); err != nil {
				return nil, err
			}
		}
		hdir := filepath.Join(dir, h.ns)
		if err := os.Mkdir(hdir, 0o755); err != nil {
			return nil, err
		}
		hpub, err := writeKey(filepath.Join(hdir, "host_key"))
		if err != nil {
			return nil, err
		}
		h.hostKey = strings.TrimSpace(string(xssh.MarshalAuthorizedKey(hpub)))
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
`, h.ip, hdir, hdir, dir, hdir)
		if err := os.WriteFile(filepath.Join(hdir, "sshd_config"), []byte(conf), 0o600); err != nil {
			return nil, err
		}
		h.sshd = exec.Command("ip", "netns", "exec", h.ns, "/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(hdir, "sshd_config"))
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
	for _, h := range l.hosts {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", h.ip+":22", time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(dir, h.ns, "sshd.log"))
				return nil, fmt.Errorf("sshd on %s did not start: %v\n%s", h.ip, err, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return l, nil
}

// close stops the sshds and removes the namespaces (which removes the veths).
func (l *lab) close() {
	for _, h := range l.hosts {
		if h.sshd != nil && h.sshd.Process != nil {
			_ = h.sshd.Process.Kill()
			_ = h.sshd.Wait()
		}
		_ = run("ip", "link", "del", h.veth)
		_ = run("ip", "netns", "del", h.ns)
	}
	os.RemoveAll(l.dir)
}

// cut takes host i off the network (true) or brings it back (false).
func (l *lab) cut(i int, off bool) error {
	state := "up"
	if off {
		state = "down"
	}
	return run("ip", "link", "set", l.hosts[i].veth, state)
}

// knownHosts writes a known_hosts file listing every host.
func (l *lab) knownHosts() (string, error) {
	var b strings.Builder
	for _, h := range l.hosts {
		pub, _, _, _, err := xssh.ParseAuthorizedKey([]byte(h.hostKey))
		if err != nil {
			return "", err
		}
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(h.ip + ":22")}, pub) + "\n")
	}
	path := filepath.Join(l.dir, "known_hosts")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// settings returns location settings for the lab's hosts, keeping their
// remote folders under base. Hosts use pinned keys unless knownHosts.
func (l *lab) settings(base string, capacity int, knownHostsFile string) map[string]any {
	exe, _ := os.Executable()
	var hosts []any
	for _, h := range l.hosts {
		m := map[string]any{
			"address": h.ip, "port": 22, "user": "root", "key_file": l.clientKey,
			"capacity": capacity, "dir": filepath.Join(base, h.ns),
		}
		if knownHostsFile == "" {
			m["host_key"] = h.hostKey
		}
		hosts = append(hosts, m)
	}
	s := map[string]any{
		"hosts": hosts, "binary": exe, "env": map[string]any{"TIDE_TEST_AGENT": "1"},
		"grace_period": "5s", "timeout": "10s",
	}
	if knownHostsFile != "" {
		s["known_hosts"] = knownHostsFile
	}
	return s
}

// writeKey writes a new ed25519 private key in OpenSSH format to path.
func writeKey(path string) (xssh.PublicKey, error) {
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

// testLab is the package's lab, built by TestMain.
var (
	testLab    *lab
	testLabErr error
)

// requireLab returns the lab, or skips the test (fails it under CI) when
// the machine cannot build one.
func requireLab(t *testing.T) *lab {
	t.Helper()
	if testLab != nil {
		return testLab
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("ssh lab: %v", testLabErr)
	}
	t.Skipf("ssh lab: %v", testLabErr)
	return nil
}

func startLab() func() {
	if miss := labMissing(); miss != "" {
		testLabErr = errors.New(miss)
		return func() {}
	}
	testLab, testLabErr = newLab(2)
	if testLabErr != nil {
		return func() {}
	}
	return testLab.close
}

// shared is the base of the hosts' tide folders shared by the tests, so
// the binary is copied to each host once; each test deletes its nodes.
func (l *lab) shared() string { return filepath.Join(l.dir, "remote") }
