// Package tidetest builds the tide binary for tests that start real agents
// (end-to-end tests, node containers), from the cmd/tide source of the
// same checkout.
package tidetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// builtEnv names the binary a test process built, for the processes it
// starts: a fuzz target's workers are new processes of the same test
// binary, and each built tide again in its TestMain (20-60 s under load,
// before every worker's first input and again whenever one restarts).
const builtEnv = "TIDE_TEST_BUILT_BIN"

// Build builds cmd/tide into a new temporary folder; cmdDir is the path of
// cmd/tide relative to the calling test's package. It returns the binary
// and a function that removes it. A process started by one that built it
// (a fuzz worker) gets the same binary, and a cleanup that leaves it.
func Build(cmdDir string) (bin string, cleanup func(), err error) {
	if bin := os.Getenv(builtEnv); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			return bin, func() {}, nil
		}
	}
	dir, err := os.MkdirTemp("", "tide-test-bin-")
	if err != nil {
		return "", nil, err
	}
	// Jobs of an agent running as root run as tide-job, and some run tide.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	bin = filepath.Join(dir, "tide")
	out, err := exec.Command("go", "build", "-o", bin, cmdDir).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building tide: %w\n%s", err, out)
	}
	os.Setenv(builtEnv, bin)
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Main runs a test binary's tests with *bin set to a freshly built tide
// (built from cmdDir, relative to the test's package) and exits.
func Main(m interface{ Run() int }, cmdDir string, bin *string) {
	b, cleanup, err := Build(cmdDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = b
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// JobWritable creates the empty file path that jobs of any user may
// append to (jobs of an agent running as root run as tide-job); its
// folder must be one they can pass through, as a server's data folder is.
func JobWritable(t interface{ Fatalf(string, ...any) }, path string) string {
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatalf("creating %s: %v", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatalf("creating %s: %v", path, err)
	}
	return path
}

// SharedDir makes a folder that jobs of any user may write (jobs of an
// agent running as root run as tide-job) and that is removed when the
// test ends: where a test's job leaves a file for the test to read.
func SharedDir(t interface {
	Helper()
	Fatal(...any)
	Cleanup(func())
}) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tide-test-shared-")
	if err == nil {
		err = os.Chmod(dir, 0o1777)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
