package server

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

func (s *Server) costRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/cost", auth: can(service.PermCostRead), summary: "What the workspace's nodes (by=compute|node|workspace) or jobs (by=job|tag|user) cost since a time (since=RFC 3339 or a duration like 7d or 24h; default: all)", response: api.CostReport{}, handler: s.cost},
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

func (s *Server) historyRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/computes/{name}/history", auth: can(service.PermComputesRead), summary: "A compute's nodes by state, jobs and utilisation over time, sampled once a minute and kept a week (since=RFC 3339 or 6h/7d, default 24h; points=N buckets, default 120)", response: []api.ComputeSample{}, handler: s.computeHistory},
	}
}

func (s *Server) computeHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := api.ParseSince(cmp.Or(q.Get("since"), "24h"), time.Now())
	if err != nil {
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeValidation, Field: "since", Detail: err.Error()})
		return
	}
	points := 120
	if v := q.Get("points"); v != "" {
		if points, err = strconv.Atoi(v); err != nil || points < 1 || points > 10000 {
			writeProblem(w, &api.Problem{Status: 400, Code: api.CodeValidation, Field: "points", Detail: "points: want a number of buckets from 1 to 10000 (got " + v + ")"})
			return
		}
	}
	out, err := s.svc.ComputeHistory(r.Context(), r.PathValue("workspace"), r.PathValue("name"), since, points)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, out)
}
