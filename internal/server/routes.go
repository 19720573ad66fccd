package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

func (s *Server) routes() []route {
	ws := "/v1/workspaces/{workspace}"
	return slices.Concat([]route{
		{method: "GET", pattern: "/livez", auth: authPublic, summary: "Liveness: the process serves HTTP", handler: s.livez},
		{method: "GET", pattern: "/readyz", auth: authPublic, summary: "Readiness: the store answers", handler: s.readyz},
		{method: "GET", pattern: "/metrics", auth: s.metricsAuth(), summary: "Prometheus metrics (a token is needed unless the server's metrics_open is set)", handler: s.metrics.ServeHTTP},
		{method: "GET", pattern: "/v1/openapi.json", auth: authPublic, summary: "This API's OpenAPI 3 document", handler: s.openapi},

		{method: "GET", pattern: "/v1/sizes", auth: authSignedIn, summary: "List VM sizes", response: api.List[api.Size]{}, handler: s.listSizes},
		{method: "GET", pattern: "/v1/locations", auth: authSignedIn, summary: "List locations", response: api.List[api.Location]{}, handler: s.listLocations},
		{method: "GET", pattern: "/v1/usages", watch: true, auth: authSignedIn, summary: "Quota usage per location, VM family and tier", response: api.List[api.Usage]{}, handler: s.listUsages},

		{method: "GET", pattern: "/v1/workspaces", auth: authSignedIn, summary: "List workspaces", response: api.List[api.Workspace]{}, handler: s.listWorkspaces},
		{method: "GET", pattern: ws, auth: can(service.PermWorkspaceRead), summary: "Get a workspace", response: api.Workspace{}, handler: s.getWorkspace},
		{method: "PUT", pattern: ws, auth: authServerAdmin, summary: "Create a workspace", request: api.Workspace{}, response: api.Workspace{}, status: 201, handler: s.putWorkspace},

		{method: "GET", pattern: ws + "/computes", watch: true, auth: can(service.PermComputesRead), summary: "List computes", response: api.List[api.Compute]{}, handler: s.listComputes},
		{method: "PUT", pattern: ws + "/computes/{name}", auth: can(service.PermComputesWrite), summary: "Create or update a compute", request: api.Compute{}, response: api.Compute{}, status: 201, handler: s.putCompute},
		{method: "GET", pattern: ws + "/computes/{name}", watch: true, auth: can(service.PermComputesRead), summary: "Get a compute (Accept: application/yaml: as an editable file, without server-set fields)", response: api.Compute{}, handler: s.getCompute},
		{method: "PATCH", pattern: ws + "/computes/{name}", auth: can(service.PermComputesWrite), summary: "Update a compute's scale settings", request: api.ComputePatch{}, response: api.Compute{}, handler: s.patchCompute},
		{method: "DELETE", pattern: ws + "/computes/{name}", auth: can(service.PermComputesWrite), summary: "Delete a compute, or detach an attached one (underlyingResourceAction=Detach; force=true cancels its jobs)", status: 202, handler: s.deleteCompute},
		{method: "GET", pattern: ws + "/computes/{name}/nodes", watch: true, auth: can(service.PermComputesRead), summary: "List a compute's nodes", response: api.List[api.Node]{}, handler: s.listNodes},
		{method: "POST", pattern: ws + "/computes/{name}/nodes/{node}/preempt", auth: can(service.PermComputesWrite), summary: "Preempt a low-priority node, as an eviction would", response: api.Node{}, status: 202, handler: s.preemptNode},
		{method: "GET", pattern: ws + "/computes/{name}/events", watch: true, auth: can(service.PermComputesRead), summary: "List a compute's events", response: api.List[api.Event]{}, handler: s.computeEvents},

		{method: "POST", pattern: ws + "/jobs", submit: true, auth: can(service.PermJobsWrite), summary: "Submit a job", request: api.Job{}, response: api.Job{}, status: 201, handler: s.createJob},
		{method: "POST", pattern: ws + "/jobs/validate", auth: can(service.PermJobsWrite), summary: "Check a job before its code and data are uploaded (every problem at once)", request: api.Job{}, status: 204, handler: s.validateJob},
		{method: "GET", pattern: ws + "/jobs", watch: true, auth: can(service.PermJobsRead), summary: "List jobs, newest first (filters: compute, status; limit=N; order=oldest)", response: api.List[api.Job]{}, handler: s.listJobs},
		{method: "GET", pattern: ws + "/jobs/{name}", watch: true, auth: can(service.PermJobsRead), summary: "Get a job", response: api.Job{}, handler: s.getJob},
		{method: "POST", pattern: ws + "/jobs/{name}/cancel", auth: can(service.PermJobsWrite), summary: "Cancel a job", response: api.Job{}, status: 202, handler: s.cancelJob},
		{method: "GET", pattern: ws + "/jobs/{name}/events", watch: true, auth: can(service.PermJobsRead), summary: "List a job's events", response: api.List[api.Event]{}, handler: s.jobEvents},
		{method: "GET", pattern: ws + "/jobs/{name}/logs", auth: can(service.PermJobsRead), summary: "A job's log: JSON, or server-sent events with Accept: text/event-stream (resumes from Last-Event-ID)", response: api.List[api.LogLine]{}, sse: true, handler: s.jobLogs},
		{method: "GET", pattern: ws + "/jobs/{name}/artifacts", auth: can(service.PermJobsRead), summary: "List a job's artifacts (outputs/, logs/)", response: api.List[api.Artifact]{}, handler: s.listArtifacts},
		{method: "GET", pattern: ws + "/jobs/{name}/artifacts/{path...}", auth: can(service.PermJobsRead), summary: "Download one artifact", handler: s.getArtifact},

		{method: "POST", pattern: "/v1/agent/register", auth: authNode, summary: "Agent: register a node", request: api.AgentHello{}, response: api.AgentWelcome{}, handler: s.agentRegister},
		{method: "POST", pattern: "/v1/agent/stream", auth: authNode, rawBody: true, summary: "Agent: assignments and cancels as server-sent events; the request's body carries the agent's heartbeats, one JSON object a line, each answered by a beat (or beat_error) event", request: api.AgentHeartbeat{}, sse: true, handler: s.agentStream},
		{method: "GET", pattern: "/v1/agent/stream", auth: authNode, summary: "Agent: assignments and cancels as server-sent events (older agents, which heartbeat by request)", sse: true, handler: s.agentStream},
		{method: "POST", pattern: "/v1/agent/heartbeat", auth: authNode, summary: "Agent: heartbeat; the answer says which assignments to stop, or the one to run", request: api.AgentHeartbeat{}, response: api.AgentHeartbeatReply{}, handler: s.agentHeartbeat},
		{method: "POST", pattern: "/v1/agent/assignments/{id}/logs", auth: authNode, summary: "Agent: a batch of log lines", request: api.LogBatch{}, status: 204, handler: s.agentLogs},
		{method: "PUT", pattern: "/v1/agent/assignments/{id}/checkpoint", auth: authNode, rawBody: true, summary: "Agent: upload the job's checkpoint folder as tar.gz", status: 204, handler: s.agentPutCheckpoint},
		{method: "GET", pattern: "/v1/agent/assignments/{id}/checkpoint", auth: authNode, summary: "Agent: download the job's latest checkpoint (404: none)", handler: s.agentGetCheckpoint},
		{method: "PUT", pattern: "/v1/agent/assignments/{id}/artifacts", auth: authNode, summary: "Agent: upload outputs/ and logs/ as tar.gz", status: 204, handler: s.agentArtifacts},
		{method: "POST", pattern: "/v1/agent/assignments/{id}/status", auth: authNode, summary: "Agent: report an assignment's status", request: api.AssignmentStatus{}, status: 204, handler: s.agentStatus},
	}, s.dataRoutes(), s.environmentRoutes(ws), s.componentRoutes(ws), s.dataAssetRoutes(ws), s.metricRoutes(ws), s.parseRoutes(), s.instanceRoutes(ws), s.sshRoutes(ws), s.costRoutes(ws), s.budgetRoutes(ws), s.historyRoutes(ws), s.accessRoutes(ws), s.identityRoutes())
}

func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	err := s.store.View(r.Context(), func(tx store.Tx) error {
		_, err := tx.GetWorkspace(r.Context(), api.DefaultWorkspace)
		return err
	})
	if err != nil {
		writeJSON(w, 503, map[string]string{"status": "unavailable", "error": err.Error()})
		return
	}
	leader := s.cfg.Replica
	if s.repl != nil {
		if leader, err = s.repl.cluster.Leader(r.Context()); err != nil {
			writeJSON(w, 503, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
	}
	writeJSON(w, 200, map[string]any{"status": "ok", "replica": s.cfg.Replica, "leader": leader, "leading": s.Leading()})
}

func list[T any](items []T) api.List[T] {
	if items == nil {
		items = []T{}
	}
	return api.List[T]{Value: items}
}

func (s *Server) listSizes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, list(s.svc.Catalog.Sizes()))
}

func (s *Server) listLocations(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, list(s.svc.Locations()))
}

func (s *Server) listUsages(w http.ResponseWriter, r *http.Request) {
	u, err := s.svc.Usages(r.Context(), r.URL.Query().Get("location"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(u))
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	ws, err := s.svc.Workspaces(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Users see the workspaces they have a role in.
	if p := principalOf(r); !p.admin {
		ws = slices.DeleteFunc(ws, func(w api.Workspace) bool {
			return s.allowed(r.Context(), p, w.Name, service.PermWorkspaceRead) != nil
		})
	}
	writeJSON(w, 200, list(ws))
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) {
	ws, err := s.svc.Workspace(r.Context(), r.PathValue("workspace"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, ws)
}

func (s *Server) putWorkspace(w http.ResponseWriter, r *http.Request) {
	var in api.Workspace
	b, err := readBody(r)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		err = decodeStrict(b, &in)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	in.Name = r.PathValue("workspace")
	out, created, err := s.svc.PutWorkspace(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, createdStatus(created), out)
}

func createdStatus(created bool) int {
	if created {
		return 201
	}
	return 200
}

func (s *Server) listComputes(w http.ResponseWriter, r *http.Request) {
	cs, err := s.svc.Computes(r.Context(), r.PathValue("workspace"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(cs))
}

// stripReadOnly removes kind's server-set fields (spec.StripStatus) from a
// JSON or YAML body, so a resource as the server returned it (after `show
// -o json`) can be sent back. A body that does not parse is returned as it
// is, for the spec parser to explain.
func stripReadOnly(kind string, body []byte) []byte {
	var doc map[string]any
	if err := yaml.Unmarshal(body, &doc); err != nil || doc == nil || !spec.StripStatus(kind, doc) {
		return body
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

func (s *Server) putCompute(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c, err := s.svc.ParseCompute(stripReadOnly(spec.KindCompute, b))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, created, err := s.svc.PutCompute(r.Context(), r.PathValue("workspace"), r.PathValue("name"), c, r.Header.Get("If-Match"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", out.Etag)
	writeJSON(w, createdStatus(created), out)
}

func (s *Server) getCompute(w http.ResponseWriter, r *http.Request) {
	c, err := s.svc.Compute(r.Context(), r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", c.Etag)
	if strings.Contains(r.Header.Get("Accept"), "application/yaml") {
		// The compute as its file: what `create -f` takes, to edit and PUT back.
		b, err := spec.EditableYAML(spec.KindCompute, c)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(b)
		return
	}
	writeJSON(w, 200, c)
}

func (s *Server) patchCompute(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var p api.ComputePatch
	if err := decodeStrict(b, &p); err != nil {
		s.fail(w, r, err)
		return
	}
	c, err := s.svc.PatchCompute(r.Context(), r.PathValue("workspace"), r.PathValue("name"), &p, r.Header.Get("If-Match"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", c.Etag)
	if strings.Contains(r.Header.Get("Accept"), "application/yaml") {
		// The compute as its file: what `create -f` takes, to edit and PUT back.
		b, err := spec.EditableYAML(spec.KindCompute, c)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(b)
		return
	}
	writeJSON(w, 200, c)
}

func (s *Server) deleteCompute(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var o service.DeleteOptions
	// Azure's query parameter: Delete (the default) or Detach.
	switch a := q.Get("underlyingResourceAction"); {
	case a == "" || strings.EqualFold(a, "Delete"):
	case strings.EqualFold(a, "Detach"):
		o.Detach = true
	default:
		s.fail(w, r, &service.Error{Status: 400, Code: api.CodeValidation, Field: "underlyingResourceAction", Msg: fmt.Sprintf("underlyingResourceAction: %q must be Delete or Detach", a)})
		return
	}
	switch f := q.Get("force"); f {
	case "", "false":
	case "true":
		o.Force = true
	default:
		s.fail(w, r, &service.Error{Status: 400, Code: api.CodeValidation, Field: "force", Msg: fmt.Sprintf("force: %q must be true or false", f)})
		return
	}
	if err := s.svc.DeleteCompute(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.Header.Get("If-Match"), o); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(202)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	ns, err := s.svc.Nodes(r.Context(), r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ns))
}

func (s *Server) computeEvents(w http.ResponseWriter, r *http.Request) {
	ev, err := s.svc.Events(r.Context(), r.PathValue("workspace"), "compute", r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ev))
}

func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) {
	ev, err := s.svc.Events(r.Context(), r.PathValue("workspace"), "job", r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ev))
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := s.svc.ParseJob(stripReadOnly(spec.KindJob, b))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.svc.SubmitJob(r.Context(), r.PathValue("workspace"), j)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 201, out)
}

func (s *Server) validateJob(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := s.svc.ParseJob(stripReadOnly(spec.KindJob, b))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.svc.CheckJob(r.Context(), r.PathValue("workspace"), j); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.JobFilter{Workspace: r.PathValue("workspace"), Compute: q.Get("compute")}
	if strings.EqualFold(f.Compute, "serverless") {
		// As in a job file, compute serverless means the serverless jobs
		// (each on its own hidden compute).
		f.Compute, f.Serverless = "", true
	}
	if st := q.Get("status"); st != "" {
		f.Statuses = strings.Split(st, ",")
	}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil {
		f.Limit = n
	}
	switch q.Get("order") {
	case "", "newest":
		f.Newest = true
	case "oldest":
	default:
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeValidation, Field: "order", Detail: "order " + q.Get("order") + ": newest (the default) or oldest"})
		return
	}
	if parent := q.Get("parent"); parent != "" {
		js, err := s.svc.ChildJobs(r.Context(), f.Workspace, parent)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, 200, list(js))
		return
	}
	js, err := s.svc.Jobs(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJobList(w, js)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.svc.Job(r.Context(), r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", j.Etag)
	writeJSON(w, 200, j)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	if err := s.mayCancel(r); err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := s.svc.CancelJob(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.Header.Get("If-Match"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", j.Etag)
	writeJSON(w, 202, j)
}

var _ = service.AssignmentID
