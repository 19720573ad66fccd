package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// sshServer runs what SSH clients ask of one connection: shells (with a
// terminal or without), commands, SFTP (which scp uses) and local port
// forwarding. Everything runs as the agent's user with the environment and
// HOME jobs get, never the agent's own (which could lead to its token).
type sshServer struct {
	a   *agent
	log *slog.Logger
}

// Payloads of the session requests (RFC 4254, section 6).
type (
	ptyRequest struct {
		Term          string
		Columns, Rows uint32
		Width, Height uint32
		Modes         string
	}
	windowChange struct {
		Columns, Rows uint32
		Width, Height uint32
	}
	envRequest    struct{ Name, Value string }
	execRequest   struct{ Command string }
	signalRequest struct{ Signal string }
	exitStatus    struct{ Status uint32 }
	forwardTarget struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
)

// session serves one session channel until the client closes it or its
// program ends.
func (s *sshServer) session(ctx context.Context, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	env := s.a.sshEnv()
	var (
		term     *ptyRequest
		mu       sync.Mutex
		ptmx     *os.File
		proc     *os.Process
		started  bool
		finished = make(chan struct{})
	)
	for req := range reqs {
		ok := false
		var serve func() // what the request started, served once it is answered
		switch req.Type {
		case "env":
			var e envRequest
			if ssh.Unmarshal(req.Payload, &e) == nil && envAllowed(e.Name) {
				env[e.Name], ok = e.Value, true
			}
		case "pty-req":
			var p ptyRequest
			if !started && ssh.Unmarshal(req.Payload, &p) == nil {
				term, ok = &p, true
				env["TERM"] = p.Term
			}
		case "window-change":
			var w windowChange
			if ssh.Unmarshal(req.Payload, &w) == nil {
				mu.Lock()
				if ptmx != nil {
					_ = pty.Setsize(ptmx, &pty.Winsize{Rows: uint16(w.Rows), Cols: uint16(w.Columns)})
				} else if term != nil {
					term.Columns, term.Rows = w.Columns, w.Rows
				}
				mu.Unlock()
			}
		case "signal":
			var sg signalRequest
			mu.Lock()
			if ssh.Unmarshal(req.Payload, &sg) == nil && proc != nil {
				if sig, known := sshSignals[sg.Signal]; known {
					_ = syscall.Kill(-proc.Pid, sig)
					ok = true
				}
			}
			mu.Unlock()
		case "shell", "exec":
			if started {
				break
			}
			command := ""
			if req.Type == "exec" {
				var e execRequest
				if ssh.Unmarshal(req.Payload, &e) != nil {
					break
				}
				command = e.Command
			}
			cmd := s.a.sshCommand(env, command, term != nil)
			var f *os.File
			var err error
			if term != nil {
				f, err = pty.StartWithSize(cmd, &pty.Winsize{Rows: uint16(term.Rows), Cols: uint16(term.Columns)})
			} else {
				err = startPiped(cmd, ch)
			}
			if err != nil {
				_, _ = io.WriteString(ch.Stderr(), "tide: starting "+cmd.Path+": "+err.Error()+"\r\n")
				break
			}
			mu.Lock()
			ptmx, proc, started, ok = f, cmd.Process, true, true
			mu.Unlock()
			serve = func() {
				defer close(finished)
				code := s.wait(cmd, f, ch)
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(code)}))
				_ = ch.Close()
			}
		case "subsystem":
			var e execRequest
			if started || ssh.Unmarshal(req.Payload, &e) != nil || e.Command != "sftp" {
				break
			}
			started, ok = true, true
			serve = func() {
				defer close(finished)
				s.sftp(env["HOME"], ch)
			}
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
		// The program is waited for, and its channel closed, only once
		// its request was answered: a client that sees the channel close
		// before the answer takes the request for failed (EOF), and a
		// program as short as "exit 3" may end before the answer is sent.
		if serve != nil {
			go serve()
		}
	}
	// The client closed the channel: a program still running hangs up.
	mu.Lock()
	if proc != nil {
		_ = syscall.Kill(-proc.Pid, syscall.SIGHUP)
	}
	mu.Unlock()
	if started {
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			mu.Lock()
			if proc != nil {
				_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
			}
			mu.Unlock()
		case <-ctx.Done():
		}
	}
}

// startPiped starts cmd with its standard streams on the channel.
func startPiped(cmd *exec.Cmd, ch ssh.Channel) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(stdin, ch)
		stdin.Close()
	}()
	return nil
}

// wait copies a terminal's output until the program ends and returns its
// exit status.
func (s *sshServer) wait(cmd *exec.Cmd, ptmx *os.File, ch ssh.Channel) int {
	if ptmx != nil {
		go func() { _, _ = io.Copy(ptmx, ch) }()
		// Reading ends with EIO once every process left the terminal.
		_, _ = io.Copy(ch, ptmx)
		defer ptmx.Close()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		return 255
	}
}

// sftp serves the SFTP subsystem (scp uses it) from the session's HOME.
func (s *sshServer) sftp(home string, ch ssh.Channel) {
	// The server closes what it serves when done; the channel must stay
	// open for the exit status.
	rw := struct {
		io.Reader
		io.Writer
		io.Closer
	}{ch, ch, io.NopCloser(nil)}
	srv, err := sftp.NewServer(rw, sftp.WithServerWorkingDirectory(home))
	code := uint32(0)
	if err == nil {
		if err = srv.Serve(); errors.Is(err, io.EOF) {
			err = nil
		}
		srv.Close()
	}
	if err != nil {
		s.log.Info("ssh: sftp ended", slog.Any("error", err))
		code = 1
	}
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: code}))
	_ = ch.Close()
}

// forward serves a local port forward (ssh -L): a TCP connection from the
// node to the address the client names, such as Jupyter's or a VS Code
// server's port on the node.
func (s *sshServer) forward(nc ssh.NewChannel) {
	var t forwardTarget
	if err := ssh.Unmarshal(nc.ExtraData(), &t); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "bad forward request")
		return
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port))), 10*time.Second)
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(ch, c); _ = ch.CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, ch); _ = c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
	ch.Close()
	c.Close()
}

// sshEnv is a session's environment: what jobs on the host inherit (the
// search path, locale, proxies; never TIDE_*, tokens or the agent's
// HOME), the node's home as HOME, and where the node is.
func (a *agent) sshEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); inheritable(k) {
			env[k] = v
		}
	}
	env["HOME"] = a.home()
	env["TIDE_NODE_ID"] = a.cfg.NodeID
	env["TIDE_NODE_DIR"] = a.cfg.Dir
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	env["SHELL"] = loginShell(env["SHELL"])
	return env
}

// sshCommand is the program a session runs: the user's shell, interactive
// (a login shell) or running command.
func (a *agent) sshCommand(env map[string]string, command string, tty bool) *exec.Cmd {
	sh := env["SHELL"]
	var cmd *exec.Cmd
	if command == "" {
		cmd = exec.Command(sh, "-l")
		if !tty {
			// No terminal: the shell reads commands from stdin.
			cmd = exec.Command(sh)
		}
	} else {
		cmd = exec.Command(sh, "-c", command)
	}
	cmd.Dir = env["HOME"]
	cmd.Env = envList(env, nil)
	return cmd
}

// loginShell is the shell sessions run: the user's when it exists, else
// bash, else sh (a minimal container image).
func loginShell(want string) string {
	for _, sh := range []string{want, "/bin/bash", "/bin/sh"} {
		if sh == "" {
			continue
		}
		if st, err := os.Stat(sh); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return sh
		}
	}
	return "/bin/sh"
}

// sshSignals are the signal names of RFC 4254's "signal" request.
var sshSignals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}
