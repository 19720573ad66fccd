package service

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// EmptyArtifacts keeps the empty files and folders an agent reports in
// place of an artifacts upload (api.AssignmentStatus.EmptyArtifacts).
type EmptyArtifacts interface {
	// PutEmptyArtifacts records names (paths below the job's artifacts;
	// folders end in "/") as empty files and folders of job's artifacts,
	// replacing files of the same name, as an upload would.
	PutEmptyArtifacts(ctx context.Context, ws, job string, names []string) error
}

// checkReport checks what only a final status carries: started, and
// empty_artifacts, each a clean path below outputs/ or logs/.
func (s *Service) checkReport(st api.AssignmentStatus) error {
	if st.Started && !api.JobTerminal(st.Status) {
		return errorf(400, api.CodeBadRequest, "started: only a final status carries it (got status %s); report Running instead", st.Status)
	}
	if len(st.EmptyArtifacts) == 0 {
		return nil
	}
	switch {
	case s.Artifacts == nil:
		return errorf(400, api.CodeNotSupported, "empty_artifacts: not supported by this server; upload the artifacts")
	case !api.JobTerminal(st.Status):
		return errorf(400, api.CodeBadRequest, "empty_artifacts: only a final status carries them (got status %s)", st.Status)
	case len(st.EmptyArtifacts) > api.MaxEmptyArtifacts:
		return errorf(400, api.CodeBadRequest, "empty_artifacts: at most %d names (got %d); upload the artifacts", api.MaxEmptyArtifacts, len(st.EmptyArtifacts))
	}
	for _, n := range st.EmptyArtifacts {
		p := strings.TrimSuffix(n, "/")
		if path.Clean(p) != p || (!strings.HasPrefix(p, "outputs/") && !strings.HasPrefix(p, "logs/")) {
			return errorf(400, api.CodeBadRequest, "empty_artifacts: %q must be a clean path below outputs/ or logs/", n)
		}
	}
	return nil
}

// ReportStatus records what a node reports about its rank of a job attempt
// and moves the job along: Running when a rank starts; at the end Completed
// when every rank exited 0, Failed with the first failure, Canceled when
// canceled. A failing rank makes the controller stop the others.
func (s *Service) ReportStatus(ctx context.Context, nodeID string, st api.AssignmentStatus) error {
	ws, name, attempt, err := ParseAssignmentID(st.ID)
	if err != nil {
		return err
	}
	if err := s.checkReport(st); err != nil {
		return err
	}
	st.Error = noNUL(st.Error)
	if len(st.EmptyArtifacts) > 0 && attempt > 1 {
		// A later attempt's empty files replace an earlier attempt's
		// stored files of the same name, as its upload would: they are
		// written to the server's files. Before the status is, as an
		// upload is, so that whoever sees the job ended finds its
		// artifacts; and outside the status's transaction, so that the
		// store's writer waits for no file store (and a retried
		// transaction writes nothing twice). The first attempt's are
		// kept in the job's record, with the status (no earlier stored
		// file can have their names): no file written, no read.
		if err := s.keepEmptyArtifacts(ctx, nodeID, ws, name, attempt, st); err != nil {
			return err
		}
	}
	// With the submissions and reports that arrive meanwhile; answered
	// once that transaction committed, and the controller notified.
	return s.inWriteBatch(ctx, func(ctx context.Context, tx store.Tx) error {
		j, err := tx.GetJob(ctx, ws, name)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		r := reportedRank(j, nodeID, attempt, st.NodeRank)
		if r == nil {
			return nil // a stale report, of an earlier attempt or an ended rank: nothing to do
		}
		now := s.now()
		if attempt == 1 {
			for _, n := range st.EmptyArtifacts {
				if !slices.Contains(j.EmptyArtifacts, n) {
					j.EmptyArtifacts = append(j.EmptyArtifacts, n)
				}
			}
		}
		r.Status, r.ExitCode, r.Error, r.LastNodeSeq, r.NodeFailure = st.Status, st.ExitCode, st.Error, st.LastNodeSeq, st.Preempted
		if st.Usage != nil {
			r.Usage = st.Usage
		}
		// The events are recorded with the job's write.
		var events []*api.Event
		if (st.Status == api.JobRunning || st.Started) && j.Status == api.JobPreparing {
			// (A final status that says Started stands for the Running
			// report its agent did not send: the job starts and ends in
			// one transaction.)
			j.Status, j.StartTime, j.PendingReason = api.JobRunning, now, ""
			events = append(events, &api.Event{Time: now, Kind: "Running", Message: fmt.Sprintf("started on node %s", nodeID)})
		}
		if api.JobTerminal(st.Status) {
			ended, err := finishRank(ctx, tx, j, st.NodeRank, now)
			if err != nil {
				return err
			}
			events = append(events, ended...)
		}
		return tx.PutJob(ctx, j, "", events...)
	}, nil)
}

// keepEmptyArtifacts writes the empty files and folders a later attempt's
// final status names to the server's files, when the status is the node's report of its own unfinished rank
// of the job's attempt (read, not locked: ReportStatus checks again in
// its transaction, and writing empty files for a report it then ignores
// changes nothing a user sees, as an upload of it would not).
func (s *Service) keepEmptyArtifacts(ctx context.Context, nodeID, ws, name string, attempt int, st api.AssignmentStatus) error {
	var own bool
	if err := s.Store.View(ctx, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, ws, name)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		own = reportedRank(j, nodeID, attempt, st.NodeRank) != nil
		return nil
	}); err != nil || !own {
		return err
	}
	if err := s.Artifacts.PutEmptyArtifacts(ctx, ws, name, st.EmptyArtifacts); err != nil {
		return fmt.Errorf("keeping the empty artifacts of job %s: %w", name, err)
	}
	return nil
}

// reportedRank is the rank of job j a node's report is about: rank of
// attempt, held by node and not ended; nil when the report is stale.
func reportedRank(j *api.Job, node string, attempt, rank int) *api.JobRank {
	if j.Attempt != attempt || rank < 0 || rank >= len(j.Ranks) || j.Ranks[rank].Node != node || api.JobTerminal(j.Ranks[rank].Status) {
		return nil
	}
	return &j.Ranks[rank]
}
