package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tideml/tide/api"
)

// The state file is created once per job and then overwritten in place
// (no new file per save); what a crash between the write and the cut
// leaves, a shorter document followed by the end of the longer one, still
// reads as the shorter one.
func TestStateFileIsOverwrittenInPlace(t *testing.T) {
	a := &agent{cfg: Config{Dir: t.TempDir()}, log: slog.New(slog.DiscardHandler)}
	j := newJob(a, assignment("s", "true"))
	j.saveState()
	inode := func() uint64 {
		fi, err := os.Stat(j.statePath())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	first := inode()
	j.startTime = "12345"
	j.saveState()
	j.final = &api.AssignmentStatus{ID: j.as.ID, Status: api.JobCompleted, Error: "a long error that makes this document longer"}
	j.saveState()
	if inode() != first {
		t.Error("the state file was replaced, not overwritten")
	}
	st, err := readState(j.statePath())
	if err != nil || st.Final == nil || st.Final.Error != j.final.Error || st.StartTime != "12345" || st.Assignment.ID != j.as.ID {
		t.Fatalf("state = %+v, %v", st, err)
	}

	// A crash after a shorter document was written, before the cut.
	long, _ := os.ReadFile(j.statePath())
	j.final = &api.AssignmentStatus{ID: j.as.ID, Status: api.JobFailed}
	j.saveState()
	short, _ := os.ReadFile(j.statePath())
	if len(short) >= len(long) {
		t.Fatalf("the second document is not shorter (%d >= %d)", len(short), len(long))
	}
	torn := append(short, long[len(short):]...)
	if err := os.WriteFile(j.statePath(), torn, 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := readState(j.statePath()); err != nil || st.Final == nil || st.Final.Status != api.JobFailed || st.Final.Error != "" {
		t.Errorf("after a crash before the cut: %+v, %v", st, err)
	}
}

// A job's state file is emptied when the server took its final status and
// kept for the next job: no file is created or removed per job.
func TestStateFilesAreReused(t *testing.T) {
	a := &agent{cfg: Config{Dir: t.TempDir()}, log: slog.New(slog.DiscardHandler)}
	first := newJob(a, assignment("one", "true"))
	first.saveState()
	path := first.statePath()
	fi, err := os.Stat(path)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("state file after the first save: %v, %v", fi, err)
	}
	first.releaseState()
	if !stateFilesEmpty(t, a.cfg.Dir) {
		t.Fatal("the state file was not emptied")
	}
	second := newJob(a, assignment("two", "true"))
	second.saveState()
	if second.statePath() != path {
		t.Errorf("the second job's state file is %s, not the emptied %s", second.statePath(), path)
	}
	if fi2, err := os.Stat(path); err != nil || !os.SameFile(fi, fi2) {
		t.Errorf("the state file was replaced: %v", err)
	}
	if st, err := readState(path); err != nil || st.Assignment.ID != second.as.ID {
		t.Errorf("state = %+v, %v; want the second job's", st, err)
	}
	// Two jobs at once have a file each.
	third := newJob(a, assignment("three", "true"))
	third.saveState()
	if third.statePath() == path || third.statePath() == "" {
		t.Errorf("the third job's state file is %q", third.statePath())
	}

	// An agent started later keeps an empty file for its jobs, as a
	// free one, not as an unreadable state to remove.
	second.releaseState()
	third.releaseState()
	var logged bytes.Buffer
	b := &agent{cfg: a.cfg, log: slog.New(slog.NewTextHandler(&logged, nil)), jobs: map[string]*job{}}
	b.recover(context.Background())
	if fi2, err := os.Stat(path); err != nil || !os.SameFile(fi, fi2) {
		t.Fatalf("the empty state file was not kept: %v", err)
	}
	if strings.Contains(logged.String(), "unreadable") {
		t.Errorf("recover: %s", logged.String())
	}
	fourth := newJob(b, assignment("four", "true"))
	fourth.saveState()
	if ents, _ := os.ReadDir(filepath.Join(a.cfg.Dir, "state")); len(ents) != 2 || fourth.statePath() == "" {
		t.Errorf("after a restart, a job's state file is %s, among %d files; want one of the two empty ones", fourth.statePath(), len(ents))
	}
}

// stateFilesEmpty reports whether every state file in the agent folder dir
// is empty (kept for a later job).
func stateFilesEmpty(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err != nil || fi.Size() > 0 {
			return false
		}
	}
	return true
}

// The state file keeps the inputs bound after the first save: the
// assignment's encoding, made once per job, is made again when they are
// bound. And the encoding is json.Marshal's, so that readState reads it.
func TestSavedStateHasTheBoundInputs(t *testing.T) {
	a := &agent{cfg: Config{Dir: t.TempDir()}, log: slog.New(slog.DiscardHandler)}
	as := assignment("s", "true")
	as.Data = map[string]api.JobInput{"d": {Type: "uri_folder", Mode: "direct", Path: "https://example.com/d"}}
	j := newJob(a, as)
	j.dir = filepath.Join(a.cfg.Dir, "jobs", "1")
	j.saveState()
	if err := j.prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	j.startTime = `1"2`
	j.handle = nil
	j.final = &api.AssignmentStatus{ID: j.as.ID, Status: api.JobCompleted}
	j.saveState()
	st, err := readState(j.statePath())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Assignment.Inputs["d"]; got != "https://example.com/d" {
		t.Errorf("saved inputs.d = %q, want the bound https://example.com/d", got)
	}
	want, err := json.Marshal(jobState{Assignment: j.as, StartTime: j.startTime, Final: j.final})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(j.savedState, want) {
		t.Errorf("saved state\n%s\nis not json.Marshal's\n%s", j.savedState, want)
	}
}
