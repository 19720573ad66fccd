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

// Build builds cmd/tide into a new temporary folder; cmdDir is the path of
// cmd/tide relative to the calling test's package. It returns the binary
// and a function that removes it.
func Build(cmdDir string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "tide-test-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "tide")
	out, err := exec.Command("go", "build", "-o", bin, cmdDir).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building tide: %w\n%s", err, out)
	}
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
