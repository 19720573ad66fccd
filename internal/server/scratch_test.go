package server_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStaleScratchRemovedAtStart leaves what uploads interrupted by a
// crash leave (a blob upload checked aside and an artifacts folder in
// DATA_DIR/tmp, a partial file of the file store) and checks that a
// server start removes those untouched for hours and keeps recent ones
// (an upload another replica may be receiving) and a user's file that
// only looks like a partial one.
func TestStaleScratchRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-7 * time.Hour)
	write := func(rel string, mtime time.Time) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	age := func(p string) {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	staleUpload := write("tmp/.upload-123", old)
	staleArtifacts := write("tmp/artifacts-456/outputs/model.bin", old)
	age(filepath.Dir(staleArtifacts))
	age(filepath.Join(dir, "tmp/artifacts-456"))
	stalePart := write("blobs/.part-789", old)
	stalePartDeep := write("artifacts/default/job1/outputs/.part-1011", old)
	freshUpload := write("tmp/.upload-1213", time.Now())
	freshArtifacts := write("tmp/artifacts-1415/outputs/a.txt", old)
	freshPart := write("checkpoints/default/.part-1617", time.Now())
	userFile := write("artifacts/default/job1/outputs/.part-notes", old)

	in := start(t, dir, "", "")
	defer in.shutdown()
	for _, p := range []string{staleUpload, filepath.Join(dir, "tmp/artifacts-456"), stalePart, stalePartDeep} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: still there after a start (stat: %v); want it removed", p, err)
		}
	}
	// freshArtifacts' folder was written just now (the file in it is old).
	for _, p := range []string{freshUpload, freshArtifacts, freshPart, userFile} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}
}
