//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// runAs makes cmd run as u, with u's home so that PostgreSQL's tools do not
// look for files in root's.
func runAs(cmd *exec.Cmd, u *user.User) error {
	uid, gid, err := ids(u)
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Env = append(os.Environ(), "HOME="+u.HomeDir, "USER="+u.Username, "LOGNAME="+u.Username)
	return nil
}

func chown(dir string, u *user.User) error {
	uid, gid, err := ids(u)
	if err != nil {
		return err
	}
	if err := os.Chown(dir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("giving %s to user %s: %w", dir, u.Username, err)
	}
	return nil
}

func ids(u *user.User) (uint32, uint32, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	return uint32(uid), uint32(gid), nil
}
