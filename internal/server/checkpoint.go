package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// maxCheckpoint bounds one job's checkpoint archive.
const maxCheckpoint = 4 << 30

// checkpointPath is where a job's latest checkpoint archive is kept: one
// per job, replaced by each upload, read by the next attempt's nodes.
func (s *Server) checkpointPath(ws, job string) string {
	return filepath.Join(s.cfg.DataDir, "checkpoints", ws, job+".tar.gz")
}

// assignedJob checks that the calling node runs (or ran) the assignment
// and returns its workspace and job: a node uploads and downloads only the
// checkpoints and artifacts of its own jobs.
func (s *Server) assignedJob(r *http.Request) (ws, job string, err error) {
	ws, job, _, err = service.ParseAssignmentID(r.PathValue("id"))
	if err != nil {
		return "", "", err
	}
	j, err := s.svc.Job(r.Context(), ws, job)
	if err != nil {
		return "", "", err
	}
	node := principalOf(r).node
	for _, rk := range j.Ranks {
		if rk.Node == node {
			return ws, job, nil
		}
	}
	return "", "", &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf("node %s does not run job %s", node, job)}
}

// agentPutCheckpoint stores the tar.gz of a job's checkpoint folder.
func (s *Server) agentPutCheckpoint(w http.ResponseWriter, r *http.Request) {
	ws, job, err := s.assignedJob(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	path := s.checkpointPath(ws, job)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		s.fail(w, r, err)
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), job+".*.part")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, http.MaxBytesReader(w, r.Body, maxCheckpoint))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Rename replaces the previous checkpoint at once: a reader sees
		// the old archive or the new one, never half of one.
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("storing the checkpoint of job %s: %w", job, err))
		return
	}
	w.WriteHeader(204)
}

// agentGetCheckpoint sends a job's latest checkpoint archive (404: none).
func (s *Server) agentGetCheckpoint(w http.ResponseWriter, r *http.Request) {
	ws, job, err := s.assignedJob(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := os.Open(s.checkpointPath(ws, job))
	if errors.Is(err, os.ErrNotExist) {
		writeProblem(w, &api.Problem{Status: 404, Code: api.CodeNotFound, Detail: "job " + job + " has no checkpoint yet"})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = io.Copy(w, f)
}

// preemptNode takes a low-priority node away (tide compute preempt-node).
func (s *Server) preemptNode(w http.ResponseWriter, r *http.Request) {
	n, err := s.svc.PreemptNode(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("node"), "requested through the API")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 202, n)
}
