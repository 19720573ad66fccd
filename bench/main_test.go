package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// tideBin is the tide binary the benchmark runs as server and agents, built
// without -race so that it measures what users run, or TIDE_BENCH_BIN (then
// nothing is built).
var tideBin string

func TestMain(m *testing.M) {
	if b := os.Getenv("TIDE_BENCH_BIN"); b != "" {
		tideBin = b // another commit's binary, to compare two back to back
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "tide-bench-bin-")
	if err != nil {
		panic(err)
	}
	tideBin = filepath.Join(dir, "tide")
	out, err := exec.Command("go", "build", "-o", tideBin, "../cmd/tide").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building tide: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
