package server

import (
	"net/http"
	"time"

	"github.com/tideml/tide/api"
)

func (s *Server) costRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/cost", auth: authAdmin, summary: "What the workspace's nodes (by=compute|node|workspace) or jobs (by=job|tag|user) cost since a time (since=RFC 3339 or a duration like 7d or 24h; default: all)", response: api.CostReport{}, handler: s.cost},
	}
}

func (s *Server) cost(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := api.ParseSince(v, time.Now())
		if err != nil {
			writeProblem(w, &api.Problem{Status: 400, Code: api.CodeValidation, Field: "since", Detail: err.Error()})
			return
		}
		since = t
	}
	out, err := s.svc.Cost(r.Context(), r.PathValue("workspace"), q.Get("by"), since)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, out)
}
