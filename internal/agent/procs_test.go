package agent

import (
	"runtime"
	"testing"
)

// The agent runs on one processor unless GOMAXPROCS says otherwise.
func TestLimitProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(2)
	t.Setenv("GOMAXPROCS", "")
	if n := LimitProcs(); n != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("LimitProcs() = %d, GOMAXPROCS %d; want 1, 1", n, runtime.GOMAXPROCS(0))
	}
	runtime.GOMAXPROCS(2) // as the runtime set it from the variable
	t.Setenv("GOMAXPROCS", "2")
	if n := LimitProcs(); n != 2 || runtime.GOMAXPROCS(0) != 2 {
		t.Errorf("with GOMAXPROCS=2: LimitProcs() = %d, GOMAXPROCS %d; want 2, 2", n, runtime.GOMAXPROCS(0))
	}
}
