// Package runtime starts a job's processes on a node. The process runtime
// (Process) runs the command with /bin/sh -c in its own process group, so
// that stopping a job stops everything it started. The docker runtime
// (Docker) runs it in a container of the job's environment image; the
// sandbox runtime (Sandbox) runs it in bubblewrap, for hosts without
// Docker. Every runtime implements the same Runtime interface; New builds
// one by name.
package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Spec is one process to run.
type Spec struct {
	// Command is a shell command line, run with /bin/sh -c.
	Command string
	// Dir is the working directory.
	Dir string
	// Env is the complete environment ("KEY=value").
	Env []string
	// Stdout and Stderr receive the process's output; each is written by
	// one goroutine at a time.
	Stdout, Stderr io.Writer

	// Name names the job's container or sandbox (letters, digits, '_', '.',
	// '-'); optional.
	Name string
	// Image is the environment's container image. The process runtime
	// does not use it (the server notes that in the job's log).
	Image string
	// BuildDir is a Docker build context folder; container runtimes build
	// the image from it (once per content) when Image is empty.
	BuildDir string
	// ShmSize is the size of /dev/shm in bytes; 0 keeps the runtime's default.
	ShmSize int64
	// Mounts are host folders the command uses besides Dir (the job's
	// checkpoint folder); isolating runtimes bind them at the same path,
	// writable.
	Mounts []string
	// ReadOnly are host files or folders the job sees read-only at another
	// path (ro_mount inputs), bound without a copy; writing to one fails
	// with EROFS. Only a ReadOnlyBinder takes them.
	ReadOnly []Bind
	// Note receives lines for the job's log from the runtime itself (what
	// it could not enforce, build progress); may be nil.
	Note func(string)
}

// note writes a line to s.Note when it is set.
func (s *Spec) note(format string, args ...any) {
	if s.Note != nil {
		s.Note(fmt.Sprintf(format, args...))
	}
}

// Bind shows the host file or folder Source at Target.
type Bind struct {
	Source, Target string
}

// ReadOnlyBinder is implemented by runtimes that can honour
// Spec.ReadOnly. BindsReadOnly reports whether they can as configured
// (the process runtime needs root to mount); the agent copies the inputs
// of runtimes that cannot.
type ReadOnlyBinder interface {
	BindsReadOnly() bool
}

// Runtime starts processes.
type Runtime interface {
	Start(ctx context.Context, spec Spec) (Handle, error)
}

// Preparer is implemented by runtimes that have slow work to do before a
// job can start (pulling or building an image). The agent calls Prepare
// before Start, without holding the job's lock, so a cancel is not blocked
// by a build. Prepare may change spec (the built image's name).
type Preparer interface {
	Prepare(ctx context.Context, spec *Spec) error
}

// Isolating is implemented by runtimes whose jobs do not see the node's
// own environment variables (a container has its image's PATH): the agent
// then passes only the job's variables.
type Isolating interface {
	Isolated() bool
}

// HostNetworker is implemented by runtimes that say whether a job shares
// the node's network, so it reaches the agent on 127.0.0.1 (the agent's
// MLflow endpoint). A runtime without it does not.
type HostNetworker interface {
	HostNetwork() bool
}

// ExitReasoner is implemented by handles that can explain how the process
// ended beyond its exit code (killed for exceeding its memory limit).
type ExitReasoner interface {
	// ExitReason is "" when there is nothing to add; valid after Wait.
	ExitReason() string
}

// Handle is a started process.
type Handle interface {
	// Pid is the process id; on the process runtime it is also the
	// process group id.
	Pid() int
	// Wait blocks until the process exited and its output was copied, and
	// returns its exit code (128+signal when a signal killed it, as a shell
	// reports it). Every process left in its group is killed first.
	Wait() (exitCode int, err error)
	// Stop asks the process group to stop with SIGTERM and sends SIGKILL
	// after grace if it still runs. It does not block.
	Stop(grace time.Duration)
}

// Process is the process runtime: no isolation, the job runs as the agent's
// user on the node's own filesystem.
type Process struct {
	// OutputDelay is how long Wait waits, after the process exited, for
	// output that stopped coming (a background child may hold the pipes
	// open). Default 2s.
	OutputDelay time.Duration
	// User runs the jobs as another Unix user (a location's run_as); nil
	// runs them as the agent's.
	User *User
}

// Start starts spec.Command in its own process group. With spec.ReadOnly
// the command runs in a mount namespace of its own, where each Bind is a
// read-only bind mount; the mounts are made as root, then the job's user
// takes over (setpriv), so the job cannot remount them writable.
func (p Process) Start(ctx context.Context, spec Spec) (Handle, error) {
	argv := []string{"/bin/sh", "-c", spec.Command}
	if len(spec.ReadOnly) == 0 {
		return p.start(argv, spec, 0)
	}
	if !p.BindsReadOnly() {
		return nil, errors.New("runtime process: read-only binds need an agent running as root on Linux")
	}
	if p.User != nil {
		argv = append([]string{"setpriv", fmt.Sprintf("--reuid=%d", p.User.UID), fmt.Sprintf("--regid=%d", p.User.GID), "--clear-groups", "--"}, argv...)
	}
	wrap := []string{"/bin/sh", "-c", `while [ "$1" != -- ]; do mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" || { echo "tide: cannot bind $1 read-only at $2" >&2; exit 125; }; shift 2; done; shift; exec "$@"`, "tide-mount"}
	for _, b := range spec.ReadOnly {
		wrap = append(wrap, b.Source, b.Target)
	}
	wrap = append(append(wrap, "--"), argv...)
	return p.start(wrap, spec, syscall.CLONE_NEWNS)
}

// BindsReadOnly reports whether the agent can bind read-only: it runs as
// root on Linux and may make a mount namespace and mount in it (root in a
// container without CAP_SYS_ADMIN may not).
func (p Process) BindsReadOnly() bool { return canBindReadOnly() }

// canBindReadOnly tries, once, what Start does with Spec.ReadOnly.
var canBindReadOnly = sync.OnceValue(func() bool {
	if goruntime.GOOS != "linux" || os.Geteuid() != 0 {
		return false
	}
	dir, err := os.MkdirTemp("", "tide-bind-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(dir)
	cmd := exec.Command("/bin/sh", "-c", `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && setpriv --help >/dev/null`, "probe", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return cmd.Run() == nil
})

// start starts argv (instead of spec.Command) in its own process group;
// unshare are namespaces (CLONE_NEW*) it gets of its own. In a new mount
// namespace mounts are private: nothing the job mounts shows outside.
func (p Process) start(argv []string, spec Spec, unshare uintptr) (*handle, error) {
	// Not exec.CommandContext: the job's lifetime is managed by Stop, not by
	// the caller's context.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	// The agent's own pipes, not exec's: exec's WaitDelay counts from the
	// exit, and dropped what a slow writer had not taken by then.
	stdout, err := newPipe(spec.Stdout)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	stderr := stdout
	if !sameWriter(spec.Stderr, spec.Stdout) {
		if stderr, err = newPipe(spec.Stderr); err != nil {
			stdout.abandon()
			return nil, fmt.Errorf("starting %s: %w", argv[0], err)
		}
	}
	pipes := []*pipe{stdout}
	if stderr != stdout {
		pipes = append(pipes, stderr)
	}
	cmd.Stdout, cmd.Stderr = stdout.w, stderr.w
	if f, err := devNull(); err == nil {
		cmd.Stdin = f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: unshare}
	if p.User != nil {
		if err := p.User.handOver(spec); err != nil {
			for _, pp := range pipes {
				pp.abandon()
			}
			return nil, err
		}
		if len(spec.ReadOnly) == 0 {
			cmd.SysProcAttr.Credential = p.User.credential()
		}
	}
	delay := p.OutputDelay
	if delay == 0 {
		delay = 2 * time.Second
	}
	if err := cmd.Start(); err != nil {
		for _, pp := range pipes {
			pp.abandon()
		}
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	for _, pp := range pipes {
		pp.start()
	}
	return &handle{cmd: cmd, pipes: pipes, outputDelay: delay, done: make(chan struct{})}, nil
}

// devNull is the jobs' standard input, opened once: exec.Cmd opened
// /dev/null for each process it started (four system calls).
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

type handle struct {
	cmd      *exec.Cmd
	done     chan struct{}
	stopOnce sync.Once
	// pipes carry the output; Wait drains them, giving up once they were
	// quiet for outputDelay.
	pipes       []*pipe
	outputDelay time.Duration

	mu sync.Mutex
	// killAt is when a stopping job's grace period ends (zero while it
	// is not being stopped).
	killAt time.Time
}

func (h *handle) Pid() int { return h.cmd.Process.Pid }

func (h *handle) Wait() (int, error) {
	defer close(h.done)
	pid := h.cmd.Process.Pid
	// Wait for the exit without reaping, so that the process group id cannot
	// be reused yet, then kill what the job left behind in its group.
	waitNoReap(pid)
	// A job being stopped keeps its grace period even when its main
	// process exits first: `sh -c 'prepare; python train.py'` dies at
	// SIGTERM while train.py is still saving its checkpoint and printing
	// about it, and both must be kept.
	h.mu.Lock()
	killAt := h.killAt
	h.mu.Unlock()
	for !killAt.IsZero() && time.Now().Before(killAt) && groupAlive(pid) {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	err := h.cmd.Wait()
	for _, p := range h.pipes {
		p.drain(h.outputDelay)
	}
	st := h.cmd.ProcessState
	if st == nil {
		return -1, fmt.Errorf("waiting for process %d: %w", pid, err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return st.ExitCode(), fmt.Errorf("waiting for process %d: %w", pid, err)
	}
	return st.ExitCode(), nil
}

func (h *handle) Stop(grace time.Duration) {
	h.stopOnce.Do(func() {
		pid := h.cmd.Process.Pid
		h.mu.Lock()
		h.killAt = time.Now().Add(grace)
		h.mu.Unlock()
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		go func() {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-h.done:
			case <-t.C:
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}()
	})
}

// waitNoReap blocks until pid exited, leaving it a zombie (waitid with
// WNOWAIT), so its pid and process group id stay reserved. It waits in
// the network poller on a pidfd (Linux 5.3 and later), which holds no
// thread: a waitid blocked in the kernel held its thread and, until Go's
// sysmon took it back, the agent's only processor (GOMAXPROCS=1), so the
// job's first output line could wait for sysmon's next look, up to 10 ms.
func waitNoReap(pid int) {
	if pidfdWait(pid) {
		return
	}
	const (
		pPID    = 1
		wExited = 4
		wNoWait = 0x01000000
	)
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}

// pidfdWait waits for pid to exit through a pidfd in the network poller;
// it reports false, having waited for nothing, where it cannot.
func pidfdWait(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: the poller's
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		// A pidfd is readable once its process exited.
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		exited = err == nil && n > 0
		return exited || err != nil && err != unix.EINTR
	})
	return err == nil && exited
}

// groupAlive reports whether process group pgid has a member that has not
// exited (zombies, such as the unreaped leader, do not count). It reads
// /proc; where there is none it reports false.
func groupAlive(pgid int) bool {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			return true
		}
	}
	return false
}

// HostNetwork: a process shares the node's network.
func (p Process) HostNetwork() bool { return true }
