package server

import (
	"net/http"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

func (s *Server) metricRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/jobs/{name}/metrics", auth: can(service.PermJobsRead), summary: "List the metric values a job logged (##tide metric lines; filter: name)", response: api.List[api.Metric]{}, handler: s.listJobMetrics},
	}
}

func (s *Server) listJobMetrics(w http.ResponseWriter, r *http.Request) {
	ms, err := s.svc.JobMetrics(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.URL.Query().Get("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ms))
}
