package server

import (
	"net/http"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

func (s *Server) environmentRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/environments", auth: can(service.PermDataRead), summary: "List environments, every version (filter: name)", response: api.List[api.Environment]{}, handler: s.listEnvironments},
		{method: "POST", pattern: ws + "/environments", auth: can(service.PermDataWrite), summary: "Register an environment version (an empty version gets the next number)", request: api.Environment{}, response: api.Environment{}, status: 201, handler: s.createEnvironment},
		{method: "GET", pattern: ws + "/environments/{name}/versions/{version}", auth: can(service.PermDataRead), summary: "Get one version of an environment (version latest: the newest)", response: api.Environment{}, handler: s.getEnvironment},
		{method: "DELETE", pattern: ws + "/environments/{name}/versions/{version}", auth: can(service.PermDataWrite), summary: "Delete one version of an environment", status: 204, handler: s.deleteEnvironment},
	}
}

func (s *Server) listEnvironments(w http.ResponseWriter, r *http.Request) {
	es, err := s.svc.Environments(r.Context(), r.PathValue("workspace"), r.URL.Query().Get("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(es))
}

func (s *Server) createEnvironment(w http.ResponseWriter, r *http.Request) {
	var in api.Environment
	b, err := readBody(r)
	if err == nil {
		err = decodeStrict(b, &in)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, created, err := s.svc.PutEnvironment(r.Context(), r.PathValue("workspace"), &in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, createdStatus(created), out)
}

func (s *Server) getEnvironment(w http.ResponseWriter, r *http.Request) {
	e, err := s.svc.Environment(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("version"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, e)
}

func (s *Server) deleteEnvironment(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteEnvironment(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("version")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}
