package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// maxCheckpoint bounds one job's checkpoint archive.
const maxCheckpoint = 4 << 30

// checkpointName is where a job's latest checkpoint archive is kept in
// the server's files: one per job, replaced by each upload, read by the
// next attempt's nodes.
func checkpointName(ws, job string) string { return path.Join("checkpoints", ws, job+".tar.gz") }

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
	// The store replaces the previous checkpoint at once: a reader sees
	// the old archive or the new one, never half of one, and an upload cut
	// short leaves the old one.
	if err := s.files.Put(r.Context(), checkpointName(ws, job), http.MaxBytesReader(w, r.Body, maxCheckpoint)); err != nil {
		s.fail(w, r, fmt.Errorf("storing the checkpoint of job %s in %s: %w", job, s.files, err))
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
	f, size, err := s.files.Open(r.Context(), checkpointName(ws, job))
	if errors.Is(err, fs.ErrNotExist) {
		writeProblem(w, &api.Problem{Status: 404, Code: api.CodeNotFound, Detail: "job " + job + " has no checkpoint yet"})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
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
