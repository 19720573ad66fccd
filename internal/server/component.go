package server

import (
	"net/http"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

func (s *Server) componentRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/components", auth: can(service.PermDataRead), summary: "List components, every version (filter: name)", response: api.List[api.Component]{}, handler: s.listComponents},
		{method: "POST", pattern: ws + "/components", auth: can(service.PermDataWrite), summary: "Register a component version (an empty version gets the next number)", request: api.Component{}, response: api.Component{}, status: 201, handler: s.createComponent},
		{method: "GET", pattern: ws + "/components/{name}/versions/{version}", auth: can(service.PermDataRead), summary: "Get one version of a component (version latest: the newest)", response: api.Component{}, handler: s.getComponent},
		{method: "DELETE", pattern: ws + "/components/{name}/versions/{version}", auth: can(service.PermDataWrite), summary: "Delete one version of a component", status: 204, handler: s.deleteComponent},
	}
}

func (s *Server) listComponents(w http.ResponseWriter, r *http.Request) {
	es, err := s.svc.Components(r.Context(), r.PathValue("workspace"), r.URL.Query().Get("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(es))
}

func (s *Server) createComponent(w http.ResponseWriter, r *http.Request) {
	var in api.Component
	b, err := readBody(r)
	if err == nil {
		err = decodeStrict(b, &in)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, created, err := s.svc.PutComponent(r.Context(), r.PathValue("workspace"), &in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, createdStatus(created), out)
}

func (s *Server) getComponent(w http.ResponseWriter, r *http.Request) {
	e, err := s.svc.Component(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("version"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, e)
}

func (s *Server) deleteComponent(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteComponent(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("version")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}
