// Package runtime starts a job's processes on a node. The process runtime
// (Process) runs the command with /bin/sh -c in its own process group, so
// that stopping a job stops everything it started. Sandboxed and container
// runtimes will implement the same Runtime interface.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
	"unsafe"
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
}

// Runtime starts processes.
type Runtime interface {
	Start(ctx context.Context, spec Spec) (Handle, error)
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
	// OutputDelay bounds how long Wait waits for output after the process
	// exited (a background child may hold the pipes open). Default 2s.
	OutputDelay time.Duration
}

// Start starts spec.Command in its own process group.
func (p Process) Start(ctx context.Context, spec Spec) (Handle, error) {
	// Not exec.CommandContext: the job's lifetime is managed by Stop, not by
	// the caller's context.
	cmd := exec.Command("/bin/sh", "-c", spec.Command)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	cmd.Stdout = spec.Stdout
	cmd.Stderr = spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = p.OutputDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting /bin/sh: %w", err)
	}
	return &handle{cmd: cmd, done: make(chan struct{})}, nil
}

type handle struct {
	cmd      *exec.Cmd
	done     chan struct{}
	stopOnce sync.Once
}

func (h *handle) Pid() int { return h.cmd.Process.Pid }

func (h *handle) Wait() (int, error) {
	defer close(h.done)
	pid := h.cmd.Process.Pid
	// Wait for the exit without reaping, so that the process group id cannot
	// be reused yet, then kill what the job left behind in its group.
	waitNoReap(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	err := h.cmd.Wait()
	st := h.cmd.ProcessState
	if st == nil {
		return -1, fmt.Errorf("waiting for process %d: %w", pid, err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return st.ExitCode(), fmt.Errorf("waiting for process %d: %w", pid, err)
	}
	return st.ExitCode(), nil
}

func (h *handle) Stop(grace time.Duration) {
	h.stopOnce.Do(func() {
		pid := h.cmd.Process.Pid
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
// WNOWAIT), so its pid and process group id stay reserved.
func waitNoReap(pid int) {
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
