package server

import (
	"net/http"
	"time"

	"github.com/tideml/tide/internal/service"
)

// admitSubmission takes a token from the bucket of the request's
// workspace (limits.submit_rate, limits.submit_burst), or refuses it with
// a 429 saying when the next token comes. It runs before the body is
// read, so a refusal costs no store access.
func (s *Server) admitSubmission(r *http.Request) error {
	ws := r.PathValue("workspace")
	l := s.cfg.Limits.For(ws)
	wait := s.submissions.Take(ws, l.SubmitRate, l.SubmitBurst, s.now())
	if wait == 0 {
		return nil
	}
	return service.Throttled(ws, "limits.submit_rate", wait,
		"workspace %s submits faster than its limit of %g jobs per second (bursts of %d; limits.submit_rate and limits.submit_burst in the server config); nothing was submitted: retry in %s",
		ws, l.SubmitRate, l.SubmitBurst, wait.Round(time.Millisecond))
}
