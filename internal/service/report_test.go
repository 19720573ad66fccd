package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// recordedArtifacts is an EmptyArtifacts that remembers what it was given.
type recordedArtifacts struct{ got map[string][]string }

func (r *recordedArtifacts) PutEmptyArtifacts(ctx context.Context, ws, job string, names []string) error {
	r.got[ws+"/"+job] = append(r.got[ws+"/"+job], names...)
	return nil
}

// A final status's empty_artifacts are kept only for the node's own
// unfinished rank: the first attempt's in the job's record, with the
// status; a later attempt's in the files before the status, where they
// replace an earlier attempt's; names outside outputs/ and logs/, on a
// Running status, or on a server that keeps none are refused, naming the
// field.
func TestReportStatusKeepsEmptyArtifacts(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	st, id := seedRank(t, "quiet", api.JobRunning, api.JobRunning)
	rec := &recordedArtifacts{got: map[string][]string{}}
	s := &Service{Store: st, Now: func() time.Time { return now }, Artifacts: rec}
	zero := 0
	final := api.AssignmentStatus{ID: id, Status: api.JobCompleted, ExitCode: &zero}

	for _, c := range []struct {
		names  []string
		status string
		want   string
	}{
		{[]string{"../x"}, api.JobCompleted, `"../x" must be a clean path below outputs/ or logs/`},
		{[]string{"outputs/../../x"}, api.JobCompleted, "must be a clean path"},
		{[]string{"logs"}, api.JobCompleted, "must be a clean path"},
		{[]string{"logs/std_log.txt"}, api.JobRunning, "only a final status"},
	} {
		bad := final
		bad.Status, bad.EmptyArtifacts = c.status, c.names
		if err := s.ReportStatus(ctx, "n", bad); err == nil || !strings.Contains(err.Error(), "empty_artifacts: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q on %s: err = %v, want one naming empty_artifacts and %q", c.names, c.status, err, c.want)
		}
	}
	// Another node's report keeps nothing.
	other := final
	other.EmptyArtifacts = []string{"logs/std_log.txt"}
	if err := s.ReportStatus(ctx, "m", other); err != nil || len(rec.got) != 0 {
		t.Fatalf("another node's report: %v, kept %v", err, rec.got)
	}
	ok := final
	ok.EmptyArtifacts = []string{"outputs/model/", "logs/std_log.txt"}
	if err := s.ReportStatus(ctx, "n", ok); err != nil {
		t.Fatal(err)
	}
	job := func() *api.Job {
		var j *api.Job
		err := st.View(ctx, func(tx store.Tx) (err error) {
			j, err = tx.GetJob(ctx, "default", "quiet")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// The first attempt's are kept in the job's record, no file written.
	if j := job(); j.Status != api.JobCompleted || !slices.Equal(j.EmptyArtifacts, ok.EmptyArtifacts) || len(rec.got) != 0 {
		t.Fatalf("job: %s, record %q, files %q; want Completed, the record %q and no file", j.Status, j.EmptyArtifacts, rec.got, ok.EmptyArtifacts)
	}
	// Reported again (the answer was lost): the rank has ended, nothing more is kept.
	if err := s.ReportStatus(ctx, "n", ok); err != nil || len(job().EmptyArtifacts) != 2 || len(rec.got) != 0 {
		t.Errorf("again: %v, record %q, files %q", err, job().EmptyArtifacts, rec.got)
	}

	// A later attempt's replace the earlier attempt's stored files of the
	// same name: they are written to the files, before the status.
	err := st.Update(ctx, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, "default", "quiet")
		if err != nil {
			return err
		}
		j.Status, j.Attempt, j.Ranks = api.JobRunning, 2, []api.JobRank{{Node: "n", Status: api.JobRunning}}
		return tx.PutJob(ctx, j, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	second := ok
	second.ID, second.EmptyArtifacts = AssignmentID("default", "quiet", 2), []string{"logs/std_log.txt"}
	if err := s.ReportStatus(ctx, "n", second); err != nil {
		t.Fatal(err)
	}
	if j := job(); j.Status != api.JobCompleted || len(j.EmptyArtifacts) != 2 || !slices.Equal(rec.got["default/quiet"], second.EmptyArtifacts) {
		t.Errorf("second attempt: job %s, record %q, files %q; want the files %q", j.Status, j.EmptyArtifacts, rec.got, second.EmptyArtifacts)
	}

	s.Artifacts = nil
	if err := s.ReportStatus(ctx, "n", ok); err == nil || !strings.Contains(err.Error(), "empty_artifacts: not supported") {
		t.Errorf("a server that keeps none: err = %v", err)
	}
}

// A final status that says the command started (its agent did not report
// it Running: it ended within the agent's wait) starts and ends the job in
// one transaction, with the events a Running report and a final one write;
// started on a status that is not final is refused, naming the field.
func TestFinalStatusThatStartedStartsTheJob(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	st, id := seedRank(t, "quick", api.JobPreparing, "")
	s := &Service{Store: st, Now: func() time.Time { return now }}
	if err := s.ReportStatus(ctx, "n", api.AssignmentStatus{ID: id, Status: api.JobRunning, Started: true}); err == nil || !strings.Contains(err.Error(), "started: only a final status") {
		t.Errorf("started on Running: err = %v", err)
	}
	zero := 0
	if err := s.ReportStatus(ctx, "n", api.AssignmentStatus{ID: id, Status: api.JobCompleted, ExitCode: &zero, Started: true}); err != nil {
		t.Fatal(err)
	}
	var j *api.Job
	var evs []api.Event
	var n *api.Node
	err := st.View(ctx, func(tx store.Tx) (err error) {
		if j, err = tx.GetJob(ctx, "default", "quick"); err != nil {
			return err
		}
		if n, err = tx.GetNode(ctx, "n"); err != nil {
			return err
		}
		evs, err = tx.ListEvents(ctx, "default", "job/quick", 0, 100)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if j.Status != api.JobCompleted || !j.StartTime.Equal(now) || !j.EndTime.Equal(now) || !slices.Equal(kinds, []string{"Running", api.JobCompleted}) {
		t.Errorf("job %s, start %v, end %v, events %v; want Completed, started and ended now, events Running and Completed", j.Status, j.StartTime, j.EndTime, kinds)
	}
	if n.Job != "" || n.State != api.NodeIdle {
		t.Errorf("node: job %q, %s; want free and idle", n.Job, n.State)
	}
}

// TestNULsAreNotStored: a job printing binary data sends NUL characters,
// which PostgreSQL refuses in text: a refused batch of log lines would be
// sent again for ever and the job would never end. The server stores
// them as U+FFFD, in log lines and in a final status's error.
func TestNULsAreNotStored(t *testing.T) {
	ctx := t.Context()
	st, id := seedRank(t, "bin", api.JobRunning, api.JobRunning)
	s := &Service{Store: st, Now: time.Now}
	if err := s.AppendLogs(ctx, "n", id, []api.LogLine{{NodeSeq: 1, Stream: "stdout", Text: "ELF\x00\x00x"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportStatus(ctx, "n", api.AssignmentStatus{ID: id, Status: api.JobFailed, Error: "said \x00", LastNodeSeq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.View(ctx, func(tx store.Tx) error {
		lines, err := tx.ReadLog(ctx, "default", "bin", 0, 0)
		if err != nil {
			return err
		}
		if len(lines) != 1 || lines[0].Text != "ELF\uFFFD\uFFFDx" {
			t.Errorf("log lines %+v, want one with the NULs as U+FFFD", lines)
		}
		j, err := tx.GetJob(ctx, "default", "bin")
		if err != nil {
			return err
		}
		if strings.ContainsRune(j.Ranks[0].Error, 0) || !strings.Contains(j.Ranks[0].Error, "said \uFFFD") {
			t.Errorf("rank error %q, want the NUL as U+FFFD", j.Ranks[0].Error)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeatListsChecked: a heartbeat listing more assignments than an
// agent runs, or a name that is no assignment, is refused before it joins
// a batch, where it would cost a read per name or fail the batch.
func TestHeartbeatListsChecked(t *testing.T) {
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 1},
		[]*api.Node{{ID: "n", Workspace: "default", Compute: "c", State: api.NodeIdle}}, &api.Job{Workspace: "default", Name: "done", Compute: "c", Status: api.JobCompleted})
	s := &Service{Store: st, Now: time.Now}
	many := make([]string, maxBeatAssignments+1)
	for i := range many {
		many[i] = fmt.Sprintf("default/j%d/1", i)
	}
	for name, hb := range map[string]api.AgentHeartbeat{
		"too many running": {Running: many},
		"a NUL":            {Running: []string{"default/a\x00/1"}},
		"not an ID":        {Refused: []string{"x"}},
	} {
		_, err := s.Heartbeat(t.Context(), "n", hb)
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 {
			t.Errorf("%s: %v, want a 400", name, err)
		}
	}
	if _, err := s.Heartbeat(t.Context(), "n", api.AgentHeartbeat{Running: many[:3]}); err != nil {
		t.Errorf("a heartbeat listing 3 assignments: %v", err)
	}
}

// TestReportsShareATransaction: agents' status reports that arrive while
// the writer is busy are written together in its next transaction, as
// submissions are (submit.go), each taking effect: at 10,000 nodes,
// beginning and committing one transaction per report was two fifths of
// its cost.
func TestReportsShareATransaction(t *testing.T) {
	ctx := t.Context()
	const n = 4
	var nodes []*api.Node
	for i := range n {
		nodes = append(nodes, &api.Node{ID: fmt.Sprintf("n%d", i), Workspace: "default", Compute: "c", State: api.NodeRunning, Job: AssignmentID("default", fmt.Sprintf("j%d", i), 1)})
	}
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: n}, nodes,
		&api.Job{Workspace: "default", Name: "j0", Type: "command", Command: "true", Compute: "c", Status: api.JobPreparing, Attempt: 1, Ranks: []api.JobRank{{Node: "n0"}}})
	if err := st.Update(ctx, func(tx store.Tx) error {
		for i := 1; i < n; i++ {
			if err := tx.PutJob(ctx, &api.Job{Workspace: "default", Name: fmt.Sprintf("j%d", i), Type: "command", Command: "true", Compute: "c",
				Status: api.JobPreparing, Attempt: 1, Ranks: []api.JobRank{{Node: fmt.Sprintf("n%d", i)}}}, ""); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st, release: make(chan struct{})}
	s := &Service{Store: g}
	errs := submitInTwoBatches(t, s, g, n, func(i int) error {
		return s.ReportStatus(ctx, fmt.Sprintf("n%d", i), api.AssignmentStatus{ID: AssignmentID("default", fmt.Sprintf("j%d", i), 1), Status: api.JobRunning})
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("report of j%d: %v", i, err)
		}
	}
	_ = st.View(ctx, func(tx store.Tx) error {
		for i := range n {
			if j, err := tx.GetJob(ctx, "default", fmt.Sprintf("j%d", i)); err != nil || j.Status != api.JobRunning {
				t.Errorf("job j%d after its node reported it running: %v %v", i, j, err)
			}
		}
		return nil
	})
}
