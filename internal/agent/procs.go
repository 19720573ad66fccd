package agent

import (
	"os"
	"runtime"
)

// LimitProcs runs the agent's goroutines on one processor (GOMAXPROCS=1)
// unless the GOMAXPROCS environment variable names a number; it returns
// the number in effect. The agent waits on its jobs, its server and its
// disk, and does little computing between: with one processor per core,
// each goroutine it woke (a job's pipe, a log batch, an answer) also woke
// an idle processor's thread to look for work, and the 8 agents of the
// dispatch benchmark spent about a quarter of their CPU in Go's scheduler
// and its sysmon thread. On one processor, agents' CPU per 1,000 no-op jobs
// fell by 7-12 % (alternated runs). What computes (compressing artifacts,
// hashing inputs, SSH's ciphers) is one goroutine per stream anyway, and
// the jobs are processes of their own, not held to it.
func LimitProcs() int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	runtime.GOMAXPROCS(1)
	return 1
}
