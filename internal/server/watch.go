package server

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
)

// Watching a GET route: a caller that asks for server-sent events
// (Accept: text/event-stream) on a route marked watch gets the route's
// own JSON answer as an "update" event, then again each time it changes,
// so a page stays current without polling. The answer is computed by the
// route's handler, after the route's authentication and authorization,
// so a watcher sees exactly what a GET would show it.
const (
	// watchFloor is the least time between two evaluations: a busy job's
	// log batches wake watchers many times a second.
	watchFloor = 250 * time.Millisecond
	// watchTick re-evaluates without a wake: changes made by another
	// replica, node heartbeats and clocks (durations, next runs) do not
	// signal this server's broadcast.
	watchTick = 2 * time.Second
	// watchLife ends a stream; the browser's EventSource reconnects (after
	// the retry below), and the reconnect authenticates again, so a token
	// revoked meanwhile stops being served.
	watchLife  = 2 * time.Minute
	watchRetry = 500 // ms
)

// wantsEvents reports whether r asks for server-sent events.
func wantsEvents(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// watch streams h's answer to r as it changes. A problem answer (the
// compute was deleted, the caller lost access) is sent as a "problem"
// event and ends the stream.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	out, ok := startSSE(w)
	if !ok {
		writeProblem(w, &api.Problem{Status: http.StatusNotAcceptable, Code: "NotAcceptable", Detail: "this connection cannot stream; call without Accept: text/event-stream"})
		return
	}
	if _, err := w.Write([]byte("retry: " + strconv.Itoa(watchRetry) + "\n\n")); err != nil {
		return
	}
	// The handler answers JSON: it must not see the event-stream Accept.
	get := r.Clone(r.Context())
	get.Header.Set("Accept", "application/json")
	end := time.NewTimer(watchLife)
	defer end.Stop()
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	var last []byte
	for {
		wake := s.changes.Wait()
		rec := &answer{header: http.Header{}}
		h(rec, get)
		if rec.status != 0 && rec.status != http.StatusOK {
			_ = out.sendRaw("problem", rec.body.Bytes())
			return
		}
		if !bytes.Equal(rec.body.Bytes(), last) {
			last = bytes.Clone(rec.body.Bytes())
			if out.sendRaw("update", last) != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		case <-end.C:
			return
		case <-keepalive.C:
			if out.comment("keepalive") != nil {
				return
			}
		case <-wake:
		case <-tick.C:
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(watchFloor):
		}
	}
}

// answer records a handler's response for watch.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *answer) Header() http.Header { return a.header }
func (a *answer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}
func (a *answer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}
