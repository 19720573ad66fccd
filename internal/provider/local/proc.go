package local

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// isAgent reports whether pid is alive (not a zombie) and is the agent of
// the node folder dir: same start time, and dir on its command line.
func isAgent(pid int, startTime, dir string) bool {
	if pid <= 0 || startTime == "" {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := statFields(stat)
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" || f[19] != startTime {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(cmdline), "\x00"), dir)
}

// statFields returns the fields of /proc/<pid>/stat after the command name:
// [0] is the state (field 3), [3] the session id (field 6), [19] the start
// time (field 22).
func statFields(stat []byte) []string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

func procStartTime(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	if f := statFields(stat); len(f) >= 20 {
		return f[19]
	}
	return ""
}

// processes calls fn with each process's pid and stat fields (statFields)
// until fn returns false.
func processes(fn func(pid int, f []string) bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if f := statFields(stat); len(f) >= 20 && !fn(pid, f) {
			return
		}
	}
}

// killSession sends SIGKILL to every process of session sid.
func killSession(sid int) {
	processes(func(pid int, f []string) bool {
		if f[3] == strconv.Itoa(sid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return true
	})
}

// findAgent looks in /proc for the agent of the node folder dir: a session
// leader (the provider starts each agent in its own session) alive with dir
// on its command line. It returns its pid and start time, or 0 and "".
func findAgent(dir string) (pid int, startTime string) {
	processes(func(p int, f []string) bool {
		if f[3] == strconv.Itoa(p) && isAgent(p, f[19], dir) {
			pid, startTime = p, f[19]
			return false
		}
		return true
	})
	return pid, startTime
}
