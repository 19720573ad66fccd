package readme

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// This is the full form of the README check: the blocks run.

// A README block is skipped only for one of these reasons; every other
// block runs as pasted.
var skipBlocks = []struct{ match, why string }{
	{"make demo    #", "make demo is run by cmd/tide's demo.txtar, and make test is the suite running this test"},
	{"export TIDE_STORE=postgres://tide@db.example", "an example of two replicas on other machines (db.example, 10.0.0.x); TestReplicasFailover runs the same on this one"},
}

// skipLines are single lines left out of a block, with why.
var skipLines = []struct{ match, why string }{
	{"apt-get install", ".ci/run installed these packages before the tests"},
}

// TestReadmeBlocksRun runs every shell block of the README, in order, as a
// new user pastes them on a fresh machine (a new HOME, the server on its
// default port 7430), each block with bash -e so a failing line fails it.
func TestReadmeBlocksRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's commands: a server, jobs, an instance, the examples")
	}
	if os.Getenv("CI") == "" && os.Getenv("TIDE_README_TEST") == "" {
		t.Skip("set TIDE_README_TEST=1 (CI runs it): it runs the README's commands against a server on port 7430")
	}
	if os.Getuid() != 0 {
		t.Skip("the README's commands run as root")
	}
	if l, err := net.Listen("tcp", "127.0.0.1:7430"); err != nil {
		t.Fatalf("the README's server listens on 127.0.0.1:7430, which is taken: %v", err)
	} else {
		l.Close()
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TIDE_") || strings.HasPrefix(k, "XDG_") || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home)
	// Go's module and build caches stay the machine's (a warm module cache,
	// as make test has): with the new HOME, the first block's `make build`
	// downloaded every module and compiled everything again, 10 minutes on a
	// loaded 2-core machine.
	if out, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output(); err == nil {
		if dirs := strings.Fields(string(out)); len(dirs) == 2 {
			env = append(env, "GOMODCACHE="+dirs[0], "GOCACHE="+dirs[1])
		}
	}
	// OpenSSH finds ~/.ssh through the password database, not $HOME: with
	// the test's own HOME, an ssh first on PATH offers the key the README
	// made there (as ssh does for a user whose home it is).
	bin := t.TempDir()
	realSSH, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatalf("ssh: %v (.ci/run installs openssh-client)", err)
	}
	wrapper := "#!/bin/sh\nexec " + realSSH + " -o IdentityFile=\"$HOME/.ssh/id_ed25519\" \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + bin + ":" + v
		}
	}
	run := func(what, script string, d time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
		cmd.Dir, cmd.Env, cmd.Stdin = root, env, nil
		// A file, not a pipe: the detached server must not hold the
		// test's output open.
		out, err := os.CreateTemp(t.TempDir(), "block-*.log")
		if err != nil {
			return "", err
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		if ctx.Err() != nil {
			err = fmt.Errorf("%s: still running after %s", what, d)
		}
		b, _ := os.ReadFile(out.Name())
		return string(b), err
	}
	t.Cleanup(func() {
		if out, err := run("stopping the server", "bin/tide server stop --nodes", time.Minute); err != nil {
			t.Logf("bin/tide server stop --nodes: %v\n%s", err, out)
		}
	})
	ran := 0
blocks:
	for _, b := range shellBlocks(t, filepath.Join(root, "README.md")) {
		for _, s := range skipBlocks {
			if strings.Contains(b.text, s.match) {
				t.Logf("README.md:%d: skipped: %s", b.line, s.why)
				continue blocks
			}
		}
		var lines []string
		for _, l := range strings.Split(b.text, "\n") {
			skip := ""
			for _, s := range skipLines {
				if strings.Contains(l, s.match) {
					skip = s.why
				}
			}
			if skip != "" {
				t.Logf("README.md:%d: line %q skipped: %s", b.line, strings.TrimSpace(l), skip)
				continue
			}
			lines = append(lines, l)
		}
		start := time.Now()
		out, err := run(fmt.Sprintf("README.md:%d", b.line), strings.Join(lines, "\n"), 10*time.Minute)
		if err != nil {
			t.Fatalf("README.md:%d: the block fails as pasted (%v):\n%s\n--- output:\n%s", b.line, err, b.text, out)
		}
		t.Logf("README.md:%d: ran in %s", b.line, time.Since(start).Round(time.Second))
		ran++
	}
	if ran < 10 {
		t.Errorf("ran %d README blocks; the README has more than that", ran)
	}
}
