//go:build !unix

package pgtest

import (
	"errors"
	"os/exec"
	"os/user"
)

func runAs(*exec.Cmd, *user.User) error {
	return errors.New("running PostgreSQL as another user needs a Unix system")
}

func chown(string, *user.User) error {
	return errors.New("running PostgreSQL as another user needs a Unix system")
}
