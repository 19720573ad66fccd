package main

// End-to-end tests of the tide command: testscript runs the scripts in
// testdata/script, where "tide" is this test binary re-executed as the real
// CLI (so `exec tide server ... &` starts a real server process, with a real
// SQLite store in the script's work folder, and every CLI call is a real
// process talking to it over HTTP).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/tideml/tide/internal/demo"
	"github.com/tideml/tide/internal/freeport"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"tide": func() { os.Exit(run()) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup:               setup,
		Condition:           condition,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitserver": waitServer,
			"exits":      exits,
			"waitfor":    waitFor,
			"mkfile":     mkfile,
		},
	})
}

// setup gives every script its own port and config folders, so the server
// writes its client config into the script's work folder and the CLI reads
// it from there.
func setup(env *testscript.Env) error {
	// The scripts start `tide server` on these ports, and restart it on
	// them: ports nothing else takes meanwhile (see freeport).
	port, err := freeport.Get()
	if err != nil {
		return err
	}
	env.Setenv("PORT", strconv.Itoa(port))
	port2, err := freeport.Get()
	if err != nil {
		return err
	}
	env.Setenv("PORT2", strconv.Itoa(port2))
	env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, "config"))
	env.Setenv("XDG_DATA_HOME", filepath.Join(env.WorkDir, "share"))
	env.Setenv("HOME", filepath.Join(env.WorkDir, "home"))
	// Azure's example files, which scripts run as users would.
	env.Setenv("EXAMPLES", "/work/shared/data/azureml-examples/cli")
	// This repository, for its examples/.
	repo, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	env.Setenv("REPO", repo)
	// Agents of the local provider run detached from the server (a server
	// restart must not kill them), so a script that fails halfway could
	// leave some behind: stop those this script's server started.
	env.Defer(func() {
		stopAgents(filepath.Join(env.WorkDir, "data"))
		stopAgents(filepath.Join(env.WorkDir, "data2"))
	})
	return nil
}

// waitServer waits until the server on $PORT answers /readyz and has
// written the client config, or fails the script after a deadline.
//
//	waitserver [timeout]
func waitServer(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! waitserver")
	}
	timeout := 30 * time.Second
	if len(args) > 0 {
		d, err := time.ParseDuration(args[0])
		ts.Check(err)
		timeout = d
	}
	url := fmt.Sprintf("http://127.0.0.1:%s/readyz", ts.Getenv("PORT"))
	cfg := filepath.Join(ts.Getenv("XDG_CONFIG_HOME"), "tide", "config.json")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		lastErr = ready(ctx, url, cfg)
		if lastErr == nil {
			return
		}
		select {
		case <-ctx.Done():
			ts.Fatalf("server not ready after %s: %v", timeout, lastErr)
		case <-tick.C:
		}
	}
}

func ready(ctx context.Context, url, cfg string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	if _, err := os.Stat(cfg); err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	return nil
}

// waitFor waits until a file (one a background command writes) matches a
// regular expression, or fails the script after a deadline.
//
//	waitfor FILE REGEXP [timeout]
func waitFor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: waitfor FILE REGEXP [timeout]")
	}
	// Multi-line mode, as the stdout and stderr commands match.
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	timeout := 30 * time.Second
	if len(args) == 3 {
		timeout, err = time.ParseDuration(args[2])
		ts.Check(err)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		if re.Match(b) {
			return
		}
		select {
		case <-deadline.C:
			ts.Fatalf("%s: no match for %q after %s; it holds:\n%s", args[0], args[1], timeout, b)
		case <-tick.C:
		}
	}
}

// exits runs a command and checks its exit code, since scripts must tell
// exit code 1 (server error) from 2 (usage) from 3 (not found).
//
//	exits CODE command [args...]
func exits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}

// stopAgents kills the agent processes recorded in the node folders of the
// local provider under dataDir (node.json holds the pid).
func stopAgents(dataDir string) {
	files, _ := filepath.Glob(filepath.Join(dataDir, "locations", "*", "nodes", "*", "node.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var n struct {
			PID int `json:"pid"`
		}
		if json.Unmarshal(b, &n) != nil || n.PID <= 0 {
			continue
		}
		// Only a process that is still this node's agent (its command line
		// names the node folder), never one that reused the pid.
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.PID))
		if err != nil || !bytes.Contains(cmdline, []byte(filepath.Dir(f))) {
			continue
		}
		// The agent leads its own process group (Setsid): stop the group,
		// which holds the agent and any job it runs.
		_ = syscall.Kill(-n.PID, syscall.SIGKILL)
	}
}

// mkfile [-random] SIZE PATH writes a file of SIZE bytes, zeros (which
// compress well) or random ones (which do not), for size limits.
func mkfile(ts *testscript.TestScript, neg bool, args []string) {
	random := len(args) > 0 && args[0] == "-random"
	if random {
		args = args[1:]
	}
	if neg || len(args) != 2 {
		ts.Fatalf("usage: mkfile [-random] SIZE PATH")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	b := make([]byte, n)
	if random {
		_, err = rand.Read(b)
		ts.Check(err)
	}
	p := ts.MkAbs(args[1])
	ts.Check(os.MkdirAll(filepath.Dir(p), 0o755))
	ts.Check(os.WriteFile(p, b, 0o644))
}

// condition answers the scripts' [ml] condition: whether the host can run
// the ML examples. Under CI it is always true, so a CI machine that lacks
// them fails instead of skipping.
func condition(cond string) (bool, error) {
	switch cond {
	case "ml":
		return os.Getenv("CI") != "" || demo.MLMissing() == "", nil
	case "jupyter":
		// CI installs Debian's jupyter-notebook; elsewhere it may be absent.
		_, err := exec.LookPath("jupyter-notebook")
		return os.Getenv("CI") != "" || err == nil, nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}
