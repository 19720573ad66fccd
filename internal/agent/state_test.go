package agent

import (
	"log/slog"
	"os"
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
