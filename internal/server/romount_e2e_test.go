package server_test

// End-to-end tests of input modes on real agents: ro_mount shows data
// already on the node read-only, without a copy; download copies it.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestROMountWithoutCopyForReal: a ro_mount input of a local datastore is
// bound read-only (the process runtime as root, the job as tide-job):
// the job reads it, a write fails with EROFS and the job fails; nothing
// is copied and the datastore is unchanged. A download input of the same
// folder is a writable copy.
func TestROMountWithoutCopyForReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process runtime binds read-only only as root")
	}
	in, dir := newServer(t)
	store := filepath.Join(dir, "datastores", "default", "workspaceblobstore", "iris")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, "iris.csv"), []byte("5.1,setosa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Writable by anyone, so only the read-only bind stops the job.
	os.Chmod(store, 0o777)
	os.Chmod(filepath.Join(store, "iris.csv"), 0o666)
	createCompute(t, in, cluster)
	const inputs = "inputs:\n  data:\n    type: uri_folder\n    path: azureml://datastores/workspaceblobstore/paths/iris\n  f:\n    type: uri_file\n    path: azureml://datastores/workspaceblobstore/paths/iris/iris.csv\n"
	reader := submit(t, in, "command: cat ${{inputs.data}}/iris.csv ${{inputs.f}} && stat -c 'inode %i' ${{inputs.data}}/iris.csv ${{inputs.f}}\ncompute: cpu-cluster\n"+inputs)
	writer := submit(t, in, "command: echo changed > ${{inputs.data}}/iris.csv\ncompute: cpu-cluster\n"+inputs)
	fileWriter := submit(t, in, "command: echo changed >> ${{inputs.f}}\ncompute: cpu-cluster\n"+inputs)
	download := submit(t, in, "command: echo changed > ${{inputs.data}}/iris.csv && cat ${{inputs.data}}/iris.csv\ncompute: cpu-cluster\n"+
		strings.Replace(inputs, "paths/iris\n", "paths/iris\n    mode: download\n", 1))

	j := waitJob(t, in, reader.Name, 60*time.Second)
	text := logText(t, in, j.Name)
	if j.Status != api.JobCompleted || strings.Count(text, "5.1,setosa") != 2 || strings.Count(text, "shown read-only at") != 2 {
		t.Errorf("reader %s: %s (%s); want Completed, the file twice and two read-only binds:\n%s", j.Name, j.Status, j.Error, text)
	}
	for _, w := range []*api.Job{writer, fileWriter} {
		j := waitJob(t, in, w.Name, 60*time.Second)
		if text := logText(t, in, j.Name); j.Status != api.JobFailed || !strings.Contains(text, "Read-only file system") {
			t.Errorf("writer %s: %s (%s); want Failed with EROFS:\n%s", j.Name, j.Status, j.Error, text)
		}
	}
	j = waitJob(t, in, download.Name, 60*time.Second)
	if text := logText(t, in, j.Name); j.Status != api.JobCompleted || !strings.Contains(text, "changed") {
		t.Errorf("download %s: %s (%s); want Completed with its own writable copy:\n%s", j.Name, j.Status, j.Error, text)
	}
	if b, err := os.ReadFile(filepath.Join(store, "iris.csv")); err != nil || string(b) != "5.1,setosa\n" {
		t.Errorf("the datastore's file after the jobs: %q, %v", b, err)
	}
	// No copy: the job saw the datastore's own file (its inode), and its
	// inputs folder on the node is gone once it ended.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(store, "iris.csv"), &st); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(text, fmt.Sprintf("inode %d\n", st.Ino)); n != 2 {
		t.Errorf("the reader saw the datastore's inode %d %d times, want 2 (no copy):\n%s", st.Ino, n, text)
	}
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(p, filepath.Join("inputs", "default", reader.Name)) {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("the reader's inputs folder outlived it: %v", left)
	}
}
