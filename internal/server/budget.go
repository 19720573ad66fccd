package server

import (
	"net/http"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/spec"
)

func (s *Server) budgetRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/budgets", auth: can(service.PermCostRead), summary: "List budgets", response: api.List[api.Budget]{}, handler: s.listBudgets},
		{method: "PUT", pattern: ws + "/budgets/{name}", auth: can(service.PermCostWrite), summary: "Create or replace a budget (its alerts are kept)", request: api.Budget{}, response: api.Budget{}, status: 201, handler: s.putBudget},
		{method: "GET", pattern: ws + "/budgets/{name}", auth: can(service.PermCostRead), summary: "Get a budget: spent this period and the alerts sent", response: api.Budget{}, handler: s.getBudget},
		{method: "DELETE", pattern: ws + "/budgets/{name}", auth: can(service.PermCostWrite), summary: "Delete a budget", status: 204, handler: s.deleteBudget},
	}
}

func (s *Server) listBudgets(w http.ResponseWriter, r *http.Request) {
	bs, err := s.svc.Budgets(r.Context(), r.PathValue("workspace"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(bs))
}

func (s *Server) putBudget(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.svc.ParseBudget(stripReadOnly(spec.KindBudget, body))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, created, err := s.svc.PutBudget(r.Context(), r.PathValue("workspace"), r.PathValue("name"), b)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := 200
	if created {
		status = 201
	}
	writeJSON(w, status, out)
}

func (s *Server) getBudget(w http.ResponseWriter, r *http.Request) {
	b, err := s.svc.Budget(r.Context(), r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, b)
}

func (s *Server) deleteBudget(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteBudget(r.Context(), r.PathValue("workspace"), r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}
