package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// tokenFDEnv names the descriptor the agent re-executed itself with, from
// which it reads its token.
const tokenFDEnv = "TIDE_AGENT_TOKEN_FD"

// TakeToken returns the node token a provider passed in TokenEnv, and
// keeps it out of any place a job could read it. A process's initial
// environment stays readable in /proc/PID/environ (to processes of its
// user) even after unsetenv, so the first call re-executes the agent
// without the token in its environment, handing the token over through an
// inherited pipe; the re-executed agent reads it and closes the pipe. It
// then marks itself non-dumpable, so a job running as the same user cannot
// read its memory or environment through /proc either.
func TakeToken(args []string) (string, error) {
	if fd := os.Getenv(tokenFDEnv); fd != "" {
		os.Unsetenv(tokenFDEnv)
		n, err := strconv.Atoi(fd)
		if err != nil {
			return "", fmt.Errorf("%s: %q is not a descriptor", tokenFDEnv, fd)
		}
		f := os.NewFile(uintptr(n), "token")
		b, err := io.ReadAll(io.LimitReader(f, 64<<10))
		f.Close()
		if err != nil {
			return "", fmt.Errorf("reading the node token: %w", err)
		}
		noDump()
		return strings.TrimSpace(string(b)), nil
	}
	token := os.Getenv(TokenEnv)
	if token == "" {
		return "", fmt.Errorf("%s: not set; providers pass the node's token in it", TokenEnv)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this executable to hide the token: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	if _, err := io.WriteString(w, token); err != nil {
		return "", err
	}
	w.Close()
	// The read end must survive exec: clear its close-on-exec flag.
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, r.Fd(), syscall.F_SETFD, 0); e != 0 {
		return "", fmt.Errorf("passing the token on: %w", e)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, TokenEnv+"=") && !strings.HasPrefix(kv, tokenFDEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, tokenFDEnv+"="+strconv.Itoa(int(r.Fd())))
	err = syscall.Exec(exe, args, env)
	return "", errors.Join(errors.New("re-executing the agent without its token in the environment"), err)
}

// noDump marks the process non-dumpable: its /proc files (environ, mem)
// become readable by root only.
func noDump() {
	const prSetDumpable = 4
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
}

// home is the folder jobs on this node get as HOME (the node's home/,
// kept with the node: an instance's survives stop and start).
func (a *agent) home() string {
	h := a.cfg.Dir + "/home"
	_ = os.MkdirAll(h, 0o700)
	return h
}
