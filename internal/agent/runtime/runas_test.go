package runtime

import (
	"os"
	"path/filepath"
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
