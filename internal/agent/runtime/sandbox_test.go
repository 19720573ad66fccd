package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needBwrap skips without bubblewrap, except under CI.
func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("bwrap not found; CI must install bubblewrap")
		}
		t.Skip("bwrap not found; install bubblewrap to run this test")
	}
}

// cgroupsWritable reports whether this process may create v1 or v2
// cgroups, which the memory-limit case needs.
func cgroupsWritable() bool {
	for _, d := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		probe := filepath.Join(d, "tide-probe-"+time.Now().Format("150405.000000000"))
		if os.Mkdir(probe, 0o755) == nil {
			os.Remove(probe)
			return true
		}
	}
	return false
}

func TestSandbox(t *testing.T) {
	needBwrap(t)
	outside := t.TempDir()
	// A file in the host's /tmp, which the job's private /tmp hides.
	mf, err := os.CreateTemp("", "tide-sandbox-marker-")
	if err != nil {
		t.Fatal(err)
	}
	mf.Close()
	marker := mf.Name()
	defer os.Remove(marker)
	tests := []struct {
		name    string
		command string
		limits  Limits
		stop    bool
		code    int
		out     string
		reason  string
		cgroups bool
		noNet   bool
	}{
		{name: "exit code", command: "echo hi; exit 3", code: 3, out: "hi\n"},
		{name: "own pid namespace", command: "echo $$; tr '\\0' '\\n' < /proc/1/cmdline | head -n 1 | grep -c bwrap", out: "2\n1\n"},
		{name: "job folder writable", command: "echo x > here && cat here", out: "x\n"},
		{name: "host read-only", command: "touch " + outside + "/escape 2>/dev/null || echo denied", out: "denied\n"},
		{name: "private tmp", command: "ls " + marker + " 2>/dev/null || echo hidden", out: "hidden\n"},
		{name: "network isolated", command: "grep -c : /proc/net/dev", noNet: true, out: "1\n"},
		{name: "stop", command: "echo up; sleep 300", stop: true, code: 143, out: "up\n"},
		{name: "memory limit", command: "head -c 300000000 /dev/zero | tail", limits: Limits{MemoryBytes: 32 << 20, VCPUs: 1},
			code: 137, reason: "out of memory (limit 32 MiB)", cgroups: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cgroups && !cgroupsWritable() {
				t.Skip("cannot create cgroups here (not root, or no delegation)")
			}
			dir := t.TempDir()
			var out, notes syncBuffer
			s := &Sandbox{Limits: tt.limits, IsolateNetwork: tt.noNet, OutputDelay: 200 * time.Millisecond}
			h, err := s.Start(t.Context(), Spec{Command: tt.command, Dir: dir, Env: os.Environ(), Stdout: &out, Stderr: &out,
				Name: "sandbox-test-" + strings.ReplaceAll(tt.name, " ", "-"), Note: func(s string) { notes.Write([]byte(s + "\n")) }})
			if err != nil {
				t.Fatal(err)
			}
			runToEnd(t, h, tt.stop, &out, tt.code, tt.reason)
			if tt.out != "" && out.String() != tt.out {
				t.Errorf("output %q, want %q (notes %q)", out.String(), tt.out, notes.String())
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "escape")); err == nil {
		t.Error("a sandboxed job wrote outside its folder")
	}
}
