package server

import (
	"net/http"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/spec"
)

func (s *Server) dataAssetRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/data", auth: can(service.PermDataRead), summary: "List data assets, every version (filters: name; archived=true includes archived versions)", response: api.List[api.DataAsset]{}, handler: s.listDataAssets},
		{method: "POST", pattern: ws + "/data", auth: can(service.PermDataWrite), summary: "Create a data asset version (immutable; an empty version gets the next number)", request: api.DataAsset{}, response: api.DataAsset{}, status: 201, handler: s.createDataAsset},
		{method: "GET", pattern: ws + "/data/{name}/versions/{version}", auth: can(service.PermDataRead), summary: "Get one version of a data asset (version latest: the newest not archived)", response: api.DataAsset{}, handler: s.getDataAsset},
		{method: "POST", pattern: ws + "/data/{name}/versions/{version}/archive", auth: can(service.PermDataWrite), summary: "Archive a data asset version: left out of lists and @latest", response: api.DataAsset{}, handler: s.archiveDataAsset(true)},
		{method: "POST", pattern: ws + "/data/{name}/versions/{version}/restore", auth: can(service.PermDataWrite), summary: "Restore an archived data asset version", response: api.DataAsset{}, handler: s.archiveDataAsset(false)},
	}
}

func (s *Server) listDataAssets(w http.ResponseWriter, r *http.Request) {
	out, err := s.svc.DataAssets(r.Context(), r.PathValue("workspace"), r.URL.Query().Get("name"), r.URL.Query().Get("archived") == "true")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(out))
}

func (s *Server) createDataAsset(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := s.svc.ParseDataAsset(stripReadOnly(spec.KindDataAsset, b))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.svc.CreateDataAsset(r.Context(), r.PathValue("workspace"), a)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 201, out)
}

func (s *Server) getDataAsset(w http.ResponseWriter, r *http.Request) {
	out, err := s.svc.DataAsset(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("version"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, out)
}

func (s *Server) archiveDataAsset(archived bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := s.svc.ArchiveDataAsset(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.PathValue("version"), archived)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, 200, out)
	}
}
