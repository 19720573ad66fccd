package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestLetPassSeesAFolderMadeAgain: a folder above a job's that letPass
// made passable, then removed and made again without o+x (a job's inputs
// folder, removed after attempt 1 and made again for attempt 2 under a
// umask of 027), is made passable again: the cache of passable folders
// knows the folder, not its path.
func TestLetPassSeesAFolderMadeAgain(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, "inputs", "ws", "job")
	mk := func() {
		if err := os.MkdirAll(filepath.Join(parent, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, 0o750); err != nil { // what umask 027 gives
			t.Fatal(err)
		}
	}
	mk()
	u := &User{Name: "x"}
	if err := u.letPass(filepath.Join(parent, "1", "mnt")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(parent); fi.Mode().Perm()&0o001 == 0 {
		t.Fatalf("first letPass: %s not o+x", parent)
	}
	// Attempt 1 ends: its folders go; attempt 2 makes them again.
	if err := os.RemoveAll(parent); err != nil {
		t.Fatal(err)
	}
	mk()
	if err := u.letPass(filepath.Join(parent, "1", "mnt")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(parent); fi.Mode().Perm()&0o001 == 0 {
		t.Fatalf("second letPass: %s is %v, not o+x: the run_as user cannot pass it", parent, fi.Mode().Perm())
	}
}

// TestChownTree: everything below a job's folder becomes the run_as user's,
// at any depth and however many entries a folder has (more than one
// listing buffer's worth), symbolic links themselves and never what they
// point to.
func TestChownTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "agent-secret")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "job")
	deep := filepath.Join(dir, "outputs", "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 600 { // 600 long names: several getdents calls
		name := filepath.Join(dir, "code", strings.Repeat("f", 40)+strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(deep, "file"), filepath.Join(dir, "logs", "out.log")} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "outputs", "link")); err != nil {
		t.Fatal(err)
	}
	const uid, gid = 65534, 65533
	if err := chownTree(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// job, outputs/a/b/c, file, logs, out.log, code and its 600, link
	if want := 1 + 4 + 1 + 2 + 1 + 600 + 1; n != want {
		t.Errorf("walked %d entries, want %d", n, want)
	}
	if fi, _ := os.Stat(outside); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("%s, a symbolic link's target outside the folder, was given away", outside)
	}
	// A file, or a link, given as the folder is given itself.
	if err := chownTree(filepath.Join(dir, "outputs", "link"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := chownTree(filepath.Join(dir, "logs", "out.log"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "logs", "out.log")); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("chownTree of a file did not give it")
	}
	if err := chownTree(filepath.Join(root, "missing"), 0, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("chownTree(missing) = %v, want not-exist", err)
	}
}
