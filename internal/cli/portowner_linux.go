package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// portOwner names the process listening on addr (" by tide (pid 123)"),
// from /proc/net/tcp* and the processes' descriptors; "" when it cannot
// tell (another user's process, or no /proc).
func portOwner(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// local_address is HEXIP:HEXPORT; state 0A is LISTEN.
			if len(fields) < 10 || fields[3] != "0A" {
				continue
			}
			_, port, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(port, 16, 32); ok && err == nil && int(p) == tcp.Port {
				inodes[fields[9]] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			pid := strings.Split(fd, "/")[2]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return fmt.Sprintf(" by %s (pid %s)", strings.TrimSpace(string(comm)), pid)
		}
	}
	return ""
}
