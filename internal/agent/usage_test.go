package agent

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
)

// TestReadProcsReadsOnlyTheTrees checks that a heartbeat's sample reads the
// processes below its roots and not every process of the host (it read all
// of /proc each beat).
func TestReadProcsReadsOnlyTheTrees(t *testing.T) {
	// A grandchild: sh starts sleep and says so, then waits for it.
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & echo started; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	procs := readProcs(os.Getpid())
	sleep := 0
	for pid, p := range procs {
		if p.ppid == cmd.Process.Pid {
			sleep = pid
		}
	}
	if _, ok := procs[cmd.Process.Pid]; !ok || sleep == 0 {
		t.Fatalf("readProcs(self) = %d processes; want the test's child %d and its child sleep", len(procs), cmd.Process.Pid)
	}
	if _, ok := procs[1]; ok && os.Getpid() != 1 {
		t.Errorf("readProcs(self) read pid 1, which is not below the test; it must read the roots' trees only")
	}
	// A root outside the agent's tree (a container's process) is read too.
	if _, ok := readProcs(os.Getpid(), 1)[1]; !ok {
		t.Errorf("readProcs(self, 1) did not read pid 1")
	}
}

// Past maxTreeFiles files (processes with many threads, each with its
// children file), readProcs reads every process instead: a beat never
// reads more than that budget beyond what reading every process costs.
func TestReadProcsBudget(t *testing.T) {
	defer func(n int) { maxTreeFiles = n }(maxTreeFiles)
	maxTreeFiles = 0
	if _, ok := readProcs(os.Getpid())[1]; !ok && os.Getpid() != 1 {
		t.Errorf("readProcs(self) over its budget did not read every process (pid 1 missing)")
	}
}
