package ssh_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tideml/tide/internal/provider/ssh/sshlab"
)

// lab is the package's sshlab.Lab, with the ssh provider's settings for
// its hosts.
type lab struct{ *sshlab.Lab }

// settings returns location settings for the lab's hosts, keeping their
// remote folders under base. Hosts use pinned keys unless knownHosts.
func (l *lab) settings(base string, capacity int, knownHostsFile string) map[string]any {
	exe, _ := os.Executable()
	var hosts []any
	for _, h := range l.Hosts {
		m := map[string]any{
			"address": h.IP, "port": 22, "user": "root", "key_file": l.ClientKey,
			"capacity": capacity, "dir": filepath.Join(base, h.NS),
		}
		if knownHostsFile == "" {
			m["host_key"] = h.HostKey
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

// cut takes host i off the network until restore, or the test's end,
// brings it back.
func (l *lab) cut(t *testing.T, i int) (restore func()) {
	t.Helper()
	if err := l.Cut(i, true); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			if err := l.Cut(i, false); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
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
	if miss := sshlab.Missing(); miss != "" {
		testLabErr = errors.New(miss)
		return func() {}
	}
	l, err := sshlab.New(2)
	if err != nil {
		testLabErr = err
		return func() {}
	}
	testLab = &lab{l}
	return l.Close
}

// shared is the base of the hosts' tide folders shared by the tests, so
// the binary is copied to each host once; each test deletes its nodes.
func (l *lab) shared() string { return filepath.Join(l.Dir, "remote") }
