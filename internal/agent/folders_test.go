package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// sees is a command that fails unless the job's folders are there and
// empty: its working folder, ./outputs, ./logs and its checkpoint folder.
const sees = `test -d outputs && test -d logs && test -d "$TIDE_CHECKPOINT_DIR" && test -z "$(ls -A . outputs logs "$TIDE_CHECKPOINT_DIR" | grep -v -e '^outputs$' -e '^logs$' -e ':$' -e '^$')"`

// The folders of a job that left them empty are given to the next job by
// renaming them, not made again; a job's folders that hold anything, or
// whose mode the job changed, stay where they are. Either way a job sees
// its folders, empty, and can write to them.
func TestEmptyFoldersAreReused(t *testing.T) {
	srv := newFakeServer(t)
	dir := t.TempDir()
	startAgent(t, srv, dir)
	run := func(as api.Assignment) {
		t.Helper()
		srv.push("assign", as)
		waitFor(t, 10*time.Second, "the final status of "+as.ID, func() bool { _, ok := srv.final(as.ID); return ok })
		if st, _ := srv.final(as.ID); st.Status != api.JobCompleted {
			t.Fatalf("%s: %s %q", as.ID, st.Status, st.Error)
		}
	}
	inode := func(p string) uint64 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	gone := func(p string) {
		t.Helper()
		waitFor(t, 10*time.Second, p+" to be kept as a spare", func() bool { _, err := os.Stat(p); return os.IsNotExist(err) })
	}

	run(assignment("quiet", sees))
	gone(filepath.Join(dir, "jobs/ws1/quiet"))
	gone(filepath.Join(dir, "checkpoints/ws1/quiet"))
	spareJob, spareCkpt := inode(filepath.Join(dir, "spare/j1")), inode(filepath.Join(dir, "spare/c2"))

	// The next job gets them, and writes to them.
	run(assignment("writer", sees+` && echo x > outputs/x && echo c > "$TIDE_CHECKPOINT_DIR/c" && echo l > logs/l`))
	if got := inode(filepath.Join(dir, "jobs/ws1/writer")); got != spareJob {
		t.Errorf("the second job's folder is inode %d, not the spare %d: it was made again", got, spareJob)
	}
	if got := inode(filepath.Join(dir, "checkpoints/ws1/writer")); got != spareCkpt {
		t.Errorf("the second job's checkpoint folder is inode %d, not the spare %d", got, spareCkpt)
	}
	// A later attempt gets a spare job folder under its own number. (The
	// quiet job's folders are kept after its report, so by the time they
	// are gone the writer's, reported before, were looked at.)
	run(assignment("quiet2", sees))
	gone(filepath.Join(dir, "jobs/ws1/quiet2"))
	// What the writer wrote stays (its artifacts, its checkpoint for a
	// retry here).
	for _, p := range []string{"jobs/ws1/writer/1/outputs/x", "jobs/ws1/writer/1/logs/l", "checkpoints/ws1/writer/c"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("what the job wrote: %v", err)
		}
	}
	retry := assignment("retried", sees+` && test "$(basename "$PWD")" = 2`)
	retry.ID, retry.Attempt = "ws1/retried/2", 2
	run(retry)
	gone(filepath.Join(dir, "jobs/ws1/retried"))

	// A job that changed its folder's mode leaves it.
	run(assignment("chmod", sees+` && chmod 700 outputs`))
	run(assignment("quiet3", sees))
	gone(filepath.Join(dir, "jobs/ws1/quiet3"))
	if fi, err := os.Stat(filepath.Join(dir, "jobs/ws1/chmod/1/outputs")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the folder whose mode the job changed: %v, %v", fi, err)
	}

	// Empty files are something: the folder stays, and the next job,
	// given the spare quiet3 left, does not see them.
	run(assignment("touch", sees+` && touch outputs/e logs/e`))
	run(assignment("quiet4", sees))
	gone(filepath.Join(dir, "jobs/ws1/quiet4"))
	if _, err := os.Stat(filepath.Join(dir, "jobs/ws1/touch/1/outputs/e")); err != nil {
		t.Errorf("the empty file a job left: %v", err)
	}
}

// TestRetryKeepsItsCheckpointFolder: a job's checkpoint folder is the
// job's, not its attempt's. When the retry on this node was given its
// folders before the attempt before it was kept, keeping that attempt's
// folders must not take the retry's checkpoint folder away as a spare
// (found by review: with Docker the retry's checkpoints went to spare/).
func TestRetryKeepsItsCheckpointFolder(t *testing.T) {
	dir := t.TempDir()
	a := &agent{cfg: Config{Dir: dir}, log: slog.New(slog.DiscardHandler)}
	a.spares.open(filepath.Join(dir, "spare"))
	first := newJob(a, api.Assignment{ID: "ws1/retried/1", Workspace: "ws1", Job: "retried", Attempt: 1})
	second := newJob(a, api.Assignment{ID: "ws1/retried/2", Workspace: "ws1", Job: "retried", Attempt: 2})
	for _, j := range []*job{first, second} {
		if err := a.spares.make(j); err != nil {
			t.Fatal(err)
		}
	}
	a.spares.keep(first, false)
	if _, err := os.Stat(second.checkpointDir); err != nil {
		t.Errorf("the retry's checkpoint folder was taken as a spare: %v", err)
	}
	a.spares.keep(second, false)
	if _, err := os.Stat(second.checkpointDir); !os.IsNotExist(err) {
		t.Errorf("the last attempt's empty checkpoint folder was not kept: %v", err)
	}
}
