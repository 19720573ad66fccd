package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestProcess(t *testing.T) {
	tests := []struct {
		name    string
		command string
		stop    bool
		grace   time.Duration // default 300ms
		partial bool          // out is a part of the output
		code    int
		out     string
	}{
		{name: "exit code", command: "echo hi; exit 4", code: 4, out: "hi\n"},
		{name: "signal", command: "kill -KILL $$", code: 137},
		{name: "stop", command: "echo up; sleep 300", stop: true, code: 143, out: "up\n"},
		{name: "stop ignoring SIGTERM", command: "trap '' TERM; echo up; sleep 300", stop: true, code: 137, out: "up\n"},
		// The shell dies at SIGTERM while its child saves a checkpoint in
		// the grace period: the child is not killed before the grace ends,
		// and what it prints is kept (issue 21, defect 1).
		{name: "stop: a child outlives its shell", stop: true, grace: 5 * time.Second, code: 143,
			command: `sh -c 'trap "echo saving; sleep 0.3; echo saved; exit 0" TERM; echo up; while :; do sleep 0.05; done' & sleep 300`,
			out:     "saving\nsaved\n", partial: true},
		// A background child holds stdout open: Wait still returns, and
		// the child is killed with the group.
		{name: "background child", command: "sleep 300 & echo $! > bg.pid; echo done", code: 0, out: "done\n"},
		// Standard input is empty (/dev/null, shared by the jobs), and
		// the output a blocking pipe: writes beyond what the pipe holds
		// wait, and fail with EAGAIN on a non-blocking one.
		{name: "stdin empty", command: "cat; wc -c < /dev/stdin; seq 1 100000", code: 0, partial: true, out: "0\n1\n2\n"},
		{name: "large output", command: "seq 1 100000", code: 0, partial: true, out: "99999\n100000\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			h, err := Process{OutputDelay: 200 * time.Millisecond}.Start(t.Context(), Spec{
				Command: tt.command, Dir: dir, Env: os.Environ(), Stdout: &out, Stderr: &out,
			})
			if err != nil {
				t.Fatal(err)
			}
			if tt.stop {
				// Stop once the command is past its trap.
				deadline := time.Now().Add(5 * time.Second)
				for !strings.Contains(readProcOut(h.Pid()), "sleep") && time.Now().Before(deadline) {
					<-time.After(10 * time.Millisecond)
				}
				<-time.After(200 * time.Millisecond)
				grace := tt.grace
				if grace == 0 {
					grace = 300 * time.Millisecond
				}
				h.Stop(grace)
			}
			code, err := h.Wait()
			if err != nil || code != tt.code {
				t.Fatalf("Wait = %d, %v; want %d", code, err, tt.code)
			}
			if tt.partial && !strings.Contains(out.String(), tt.out) || !tt.partial && out.String() != tt.out {
				t.Errorf("output %q, want %q", out.String(), tt.out)
			}
			if b, err := os.ReadFile(dir + "/bg.pid"); err == nil {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				// SIGKILL is delivered asynchronously: give the kernel a
				// moment to end the child before calling it a survivor.
				deadline := time.Now().Add(5 * time.Second)
				for alive(pid) && time.Now().Before(deadline) {
					<-time.After(10 * time.Millisecond)
				}
				if alive(pid) {
					t.Errorf("background child %d still alive", pid)
				}
			}
		})
	}
}

// readProcOut lists the commands of pid's children, to see when the shell
// has started its sleep.
func readProcOut(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var names []string
	for _, c := range strings.Fields(string(b)) {
		comm, _ := os.ReadFile("/proc/" + c + "/comm")
		names = append(names, strings.TrimSpace(string(comm)))
	}
	return strings.Join(names, " ")
}

// alive reports whether pid exists and is neither a zombie nor dead.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// TestProcessRunAs: with a run_as user, a job runs as that user, writes in
// its own folder and HOME, and cannot read the agent's files.
func TestProcessRunAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run_as needs an agent running as root")
	}
	u, err := LookupUser("nobody")
	if err != nil || u == nil {
		t.Fatalf("LookupUser(nobody) = %v, %v", u, err)
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil { // as the agent's data folder
		t.Fatal(err)
	}
	secret := filepath.Join(root, "config.json")
	if err := os.WriteFile(secret, []byte("tide_admin_token"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, home := filepath.Join(root, "nodes", "n1", "jobs", "j1"), filepath.Join(root, "nodes", "n1", "home")
	var out bytes.Buffer
	h, err := Process{User: u}.Start(t.Context(), Spec{
		Command: "id -u; echo made > here.txt && cat here.txt; touch $HOME/h && echo home-ok; cat " + secret + " || echo denied; ls " + root + " || echo no-list",
		Dir:     dir, Env: []string{"HOME=" + home, "PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := h.Wait(); err != nil || code != 0 {
		t.Fatalf("exit %d, %v:\n%s", code, err, &out)
	}
	got := out.String()
	for _, want := range []string{fmt.Sprintf("%d\n", u.UID), "made", "home-ok", "denied", "no-list"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "tide_admin_token") {
		t.Errorf("the job read the agent's file:\n%s", got)
	}
	if _, err := LookupUser("no-such-user-xyz"); err == nil || !strings.Contains(err.Error(), "useradd") {
		t.Errorf("unknown run_as user: %v", err)
	}
}

// slowWriter takes each write after a pause, as the agent does when it
// spools a job's lines to disk on a loaded node.
type slowWriter struct {
	mu    sync.Mutex
	b     bytes.Buffer
	pause time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.pause)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestOutputSlowWriterKeepsTheTail: a job's output is kept whole when the
// writer takes it slower than the job printed it, long past OutputDelay
// after the exit; only output that stopped coming is given up on (a
// daemon holding the pipe: Wait returns about OutputDelay after its last
// line). The delay once counted from the exit and dropped the tail (the
// clean-clone CI's TestLogSpool lost line 3000).
func TestOutputSlowWriterKeepsTheTail(t *testing.T) {
	for _, rt := range []Runtime{Process{OutputDelay: 200 * time.Millisecond}, &Sandbox{OutputDelay: 200 * time.Millisecond}} {
		dir := t.TempDir()
		out := &slowWriter{pause: 300 * time.Millisecond}
		// 108 KB of lines, read 32 KB at a time: the writer takes about
		// a second and a half for them, most of it after the exit.
		h, err := rt.Start(t.Context(), Spec{Command: `i=1; while [ $i -le 4000 ]; do echo "line $i ................"; i=$((i+1)); done`,
			Dir: dir, Env: os.Environ(), Stdout: out, Stderr: out})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := h.Wait(); err != nil || code != 0 {
			t.Fatalf("%T: Wait = %d, %v", rt, code, err)
		}
		out.mu.Lock()
		text := out.b.String()
		out.mu.Unlock()
		if !strings.HasSuffix(text, "line 4000 ................\n") {
			t.Errorf("%T: the output's tail was dropped: %d bytes, ends %q", rt, len(text), text[max(0, len(text)-40):])
		}
	}
	// A daemon outside the job's process group holds the pipe open.
	var out bytes.Buffer
	h, err := Process{OutputDelay: 300 * time.Millisecond}.Start(t.Context(), Spec{Command: `setsid sleep 5 & echo bye`,
		Dir: t.TempDir(), Env: os.Environ(), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second || out.String() != "bye\n" {
		t.Errorf("a daemon holding the output: Wait took %s, output %q; want about 300 ms, \"bye\\n\"", d, out.String())
	}
}

// TestOutputOfADaemonPrintingForEver: a job that leaves a daemon printing
// for ever (its own session: the group kill misses it) ends all the same,
// after drainLimit OutputDelays at most (found by review: the drain had no
// bound).
func TestOutputOfADaemonPrintingForEver(t *testing.T) {
	var out syncBuffer
	h, err := Process{OutputDelay: 200 * time.Millisecond}.Start(t.Context(), Spec{
		Command: `setsid sh -c 'echo $$ > daemon.pid; while :; do echo tick; sleep 0.05; done' & sleep 0.5; echo done`,
		Dir:     t.TempDir(), Env: os.Environ(), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(h.(*handle).cmd.Dir, "daemon.pid")); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	start := time.Now()
	if _, err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Wait took %s with a daemon printing for ever; want about %s", d, drainLimit*200*time.Millisecond)
	}
	if !strings.Contains(out.String(), "done") {
		t.Errorf("output %q lacks the job's own line", out.String())
	}
}

// TestWaitHoldsNoThread: waiting for a job's process holds no thread (it
// waits in the network poller on a pidfd), so an agent on one processor
// runs its other goroutines, the job's output first, at once.
func TestWaitHoldsNoThread(t *testing.T) {
	const n = 40
	threads := func() int {
		b, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Threads:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
		t.Fatal("no Threads: in /proc/self/status")
		return 0
	}
	before := threads()
	var hs []Handle
	done := make(chan struct{}, n)
	for range n {
		h, err := Process{OutputDelay: 100 * time.Millisecond}.Start(t.Context(), Spec{Command: "exec sleep 30", Dir: t.TempDir(), Env: os.Environ()})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		go func() { _, _ = h.Wait(); done <- struct{}{} }()
	}
	defer func() {
		for _, h := range hs {
			h.Stop(0)
		}
		for range hs {
			<-done
		}
	}()
	most := 0
	for range 10 { // over half a second, while every Wait waits
		<-time.After(50 * time.Millisecond)
		most = max(most, threads())
	}
	if most >= before+n/2 {
		t.Errorf("%d processes waited for with %d threads (%d before): each Wait holds a thread", n, most, before)
	}
}
