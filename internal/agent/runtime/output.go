package runtime

import (
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// output copies a job's output to a writer and tells when it went quiet.
// After a job's process ended, its runtime waits for the output until the
// stream ends, or until nothing came through it for the runtime's
// OutputDelay, and for drainLimit OutputDelays at most: a process outside
// the job (a daemon it started) may hold the stream open, or print, for
// ever. The delay counts from the last output, not from the exit: a writer slow to take the lines (the agent spooling them to disk
// while the server is away, on a loaded node) once lost the tail of a job's
// output to a fixed delay after the exit.
type output struct {
	last atomic.Int64 // Unix nanoseconds of the last progress
	busy atomic.Int32 // writes in progress: never quiet during one
}

func newOutput() *output {
	o := &output{}
	o.last.Store(time.Now().UnixNano())
	return o
}

// to returns w (io.Discard when nil), its writes counted as progress.
func (o *output) to(w io.Writer) io.Writer {
	if w == nil {
		w = io.Discard
	}
	return progressWriter{o, w}
}

type progressWriter struct {
	o *output
	w io.Writer
}

func (p progressWriter) Write(b []byte) (int, error) {
	p.o.busy.Add(1)
	defer func() {
		p.o.last.Store(time.Now().UnixNano())
		p.o.busy.Add(-1)
	}()
	return p.w.Write(b)
}

// drainLimit bounds, in OutputDelays, the wait for output that keeps
// coming after the exit: a daemon the job left printing for ever, or a
// writer blocked for good, must not keep the job from ending.
const drainLimit = 10

// wait waits for done, or until the output made no progress for idle
// since the later of its last progress and the call (the process's exit),
// or for drainLimit idles in all; it reports whether done came.
func (o *output) wait(done <-chan struct{}, idle time.Duration) bool {
	from := time.Now().UnixNano()
	end := time.Now().Add(drainLimit * idle)
	for {
		quiet := time.Until(time.Unix(0, max(o.last.Load(), from)).Add(idle))
		if o.busy.Load() > 0 {
			quiet = max(quiet, idle/4)
		}
		quiet = min(quiet, time.Until(end))
		if quiet <= 0 {
			return false
		}
		t := time.NewTimer(quiet)
		select {
		case <-done:
			t.Stop()
			return true
		case <-t.C:
		}
	}
}

// pipe is a process's output stream: the process gets w, and the lines it
// writes are copied to out until every holder of w closed it, or until
// close.
type pipe struct {
	r, w *os.File
	out  *output
	dst  io.Writer
	done chan struct{}
}

// newPipe makes a pipe copying to dst; nil dst discards. Only the read
// end is the network poller's: the write end is the process's, and made
// blocking as it needs it (os.Pipe gave the poller both ends, and starting
// the process made the write end blocking again and closing it took it out
// of the poller: eight system calls per job for nothing).
func newPipe(dst io.Writer) (*pipe, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.SetNonblock(p[0], true); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, os.NewSyscallError("fcntl", err)
	}
	r, w := os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1")
	out := newOutput()
	return &pipe{r: r, w: w, out: out, dst: out.to(dst), done: make(chan struct{})}, nil
}

// start copies once the process holds its end: the agent's own copy of the
// write end is closed, so the copy ends when the process's holders do.
func (p *pipe) start() {
	_ = p.w.Close()
	go func() {
		defer close(p.done)
		_, _ = io.Copy(p.dst, p.r)
	}()
}

// drain waits for the output to end, or to stay quiet for idle, and closes
// the pipe.
func (p *pipe) drain(idle time.Duration) {
	if !p.out.wait(p.done, idle) {
		_ = p.r.Close() // ends the copy's read; a write blocked for good is left
		select {
		case <-p.done:
		case <-time.After(idle):
		}
	}
	_ = p.r.Close()
}

// abandon closes both ends of a pipe whose process did not start.
func (p *pipe) abandon() {
	_ = p.w.Close()
	_ = p.r.Close()
}

// sameWriter reports whether a and b are the same writer, as exec.Cmd
// decides to give Stdout and Stderr one pipe (a type that cannot be
// compared is not the same).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() { _ = recover() }()
	return a == b
}
