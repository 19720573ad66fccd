package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// User is the Unix user the process runtime runs jobs as (a location's
// run_as), so a job cannot read the agent's or the server's files.
type User struct {
	Name     string
	UID, GID uint32
}

// DefaultJobUser is the Unix user the process runtime runs jobs as when
// the agent runs as root and the location sets no run_as: created on
// first use as a system user with no home and no login shell.
const DefaultJobUser = "tide-job"

// SameAsAgent is the run_as value that keeps jobs running as the agent's
// own user, root included: the opt-out of DefaultJobUser.
const SameAsAgent = "same-as-agent"

// JobUser resolves a location's run_as for the process runtime: nil runs
// jobs as the agent's user. An empty run_as is DefaultJobUser when the
// agent runs as root (created if missing; FallbackJobUser where it cannot
// be created), the agent's user otherwise.
func JobUser(runAs string) (*User, error) {
	switch {
	case runAs == SameAsAgent:
		return nil, nil
	case runAs != "":
		return LookupUser(runAs)
	case os.Geteuid() != 0 || runtime.GOOS != "linux":
		return nil, nil
	}
	if _, err := user.Lookup(DefaultJobUser); err != nil {
		if err := createSystemUser(DefaultJobUser); err != nil {
			// A host without useradd (a slim node image) still has
			// nobody: the job gets its own folders all the same.
			// An image with no user database at all: nobody's usual
			// uid and gid, which need no entry to run a process.
			if _, nerr := user.Lookup(FallbackJobUser); nerr == nil {
				return LookupUser(FallbackJobUser)
			}
			if _, perr := os.Stat("/etc/passwd"); errors.Is(perr, os.ErrNotExist) {
				return &User{Name: FallbackJobUser, UID: 65534, GID: 65534}, nil
			}
			return nil, err
		}
	}
	return LookupUser(DefaultJobUser)
}

// FallbackJobUser runs jobs where DefaultJobUser cannot be created.
const FallbackJobUser = "nobody"

// createSystemUser adds name as a system user with its own group, no home
// and no login shell. Agents starting together may race to create it: a
// failure is one only if the user still does not exist.
func createSystemUser(name string) error {
	out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if err == nil {
		return nil
	}
	if _, lerr := user.Lookup(name); lerr == nil {
		return nil
	}
	if errors.Is(err, exec.ErrNotFound) {
		err = errors.New("useradd is not installed")
	}
	return fmt.Errorf("jobs run as the unprivileged user %s when the agent runs as root, and creating it failed: %v %s; create it (useradd --system %s), name another user with the location's run_as, or set run_as: %s to run jobs as root",
		name, err, strings.TrimSpace(string(out)), name, SameAsAgent)
}

// LookupUser finds a user by name or uid.
func LookupUser(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("run_as %q: no such user on this host; create it (useradd --system %s) or change the location's run_as", name, name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("run_as %q: uid %s, gid %s are not numbers", name, u.Uid, u.Gid)
	}
	if uid == uint64(os.Geteuid()) {
		return nil, nil // the agent's own user: nothing to switch
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("run_as %q: only an agent running as root can run jobs as another user", name)
	}
	return &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid)}, nil
}

// handOver gives u the job's folders (its working folder, mounts and
// HOME) and lets it pass through the folders above them (o+x, never
// o+r: it cannot list them, and the agent's own files stay its own).
func (u *User) handOver(spec Spec) error {
	dirs := append([]string{spec.Dir}, spec.Mounts...)
	for _, kv := range spec.Env {
		if home, ok := strings.CutPrefix(kv, "HOME="); ok && home != "" {
			dirs = append(dirs, home)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := chownTree(d, int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("run_as %s: giving it %s: %w", u.Name, d, err)
		}
		if err := u.letPass(d); err != nil {
			return err
		}
	}
	// Read-only binds stay their owner's: the user only needs to reach
	// the mount points.
	for _, b := range spec.ReadOnly {
		if err := u.letPass(b.Target); err != nil {
			return err
		}
	}
	return nil
}

// letPass lets u pass through the folders above d (o+x).
func (u *User) letPass(d string) error {
	var seen []string
	var ids []dirID
	for p := filepath.Dir(d); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			id := idOf(fi)
			if known, ok := passable.Load(p); ok && known.(dirID) == id {
				break // and every folder above it
			}
			if fi.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
					return fmt.Errorf("run_as %s: letting it pass %s: %w", u.Name, p, err)
				}
				if fi, err = os.Stat(p); err != nil {
					return fmt.Errorf("run_as %s: letting it pass %s: %w", u.Name, p, err)
				}
				id = idOf(fi)
			}
			seen, ids = append(seen, p), append(ids, id)
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	for i, p := range seen {
		passable.Store(p, ids[i])
	}
	return nil
}

// passable holds, by path, the folders letPass made or found o+x, with
// every folder above them: the folders above each job's are mostly the
// same (the node's, its jobs/ folder), and checking them all again for
// every job was 2 % of the agent's CPU on no-op jobs. The nearest known
// folder is still looked at, and passes for itself and those above only
// if it is the same folder, unchanged since (its inode and change time): a
// job's input folder is removed when the job ends and may be made again,
// private under a strict umask, for the next attempt. (A folder above it
// made private again while the agent runs is not seen.)
var passable sync.Map

// dirID tells a folder apart from one made at the same path later, and
// from itself before a chmod.
type dirID struct {
	ino   uint64
	ctime syscall.Timespec
}

func idOf(fi os.FileInfo) dirID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return dirID{}
	}
	return dirID{ino: st.Ino, ctime: st.Ctim}
}

func (u *User) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// chownTree gives path and everything below it to uid and gid, symbolic
// links themselves and not what they point to. It works relative to each
// folder's descriptor: filepath.WalkDir with os.Lchown resolved every
// path from the root again, and listed, sorted and stat'ed entries, which
// made handOver a third of the cost of starting a no-op job's process.
func chownTree(path string, uid, gid int) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err == syscall.ENOTDIR || err == syscall.ELOOP {
		return os.Lchown(path, uid, gid) // a file, or a symbolic link
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, uid, gid); err != nil {
		return &os.PathError{Op: "chown", Path: path, Err: err}
	}
	return chownBelow(fd, path, uid, gid, make([]byte, 8192))
}

// chownBelow gives what the open folder fd (at path, for errors) holds to
// uid and gid; buf is for its listing, and is reused below it once read.
func chownBelow(fd int, path string, uid, gid int, buf []byte) error {
	var dirs []string
	for {
		n, err := syscall.Getdents(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			break
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
			rec := buf[off:]
			reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
			typ := rec[18]
			name := rec[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if string(name) == "." || string(name) == ".." {
				continue
			}
			nm := string(name)
			if err := unix.Fchownat(fd, nm, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return &os.PathError{Op: "chown", Path: filepath.Join(path, nm), Err: err}
			}
			if typ == syscall.DT_UNKNOWN {
				var st unix.Stat_t
				if err := unix.Fstatat(fd, nm, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return &os.PathError{Op: "lstat", Path: filepath.Join(path, nm), Err: err}
				}
				if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
					typ = syscall.DT_DIR
				}
			}
			if typ == syscall.DT_DIR {
				dirs = append(dirs, nm)
			}
		}
	}
	for _, nm := range dirs {
		sub, err := syscall.Openat(fd, nm, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: filepath.Join(path, nm), Err: err}
		}
		err = chownBelow(sub, filepath.Join(path, nm), uid, gid, buf)
		syscall.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}
