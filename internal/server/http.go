package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/studio"
)

// maxBody bounds request bodies other than artifact uploads.
const maxBody = api.MaxRequestBody

// auth says who may call a route: nobody in particular (public), an
// agent with its node token (authNode), any signed-in user (authSignedIn),
// a server admin (authServerAdmin), or a principal whose role in the
// route's {workspace} grants a permission (can(service.PermX)).
type auth string

const (
	authPublic      auth = "public"
	authNode        auth = "node"
	authSignedIn    auth = "signed-in"
	authServerAdmin auth = "server-admin"
	authJobIdentity auth = "job-identity" // a job's identity token
)

// can is the auth of a workspace route that needs p.
func can(p service.Perm) auth { return auth("ws:" + string(p)) }

// perm returns the workspace permission an auth names, if it names one.
func (a auth) perm() (service.Perm, bool) {
	p, ok := strings.CutPrefix(string(a), "ws:")
	return service.Perm(p), ok
}

// route is one API route. The mux and the OpenAPI document are both built
// from the route table, and a test checks that every documented route is
// served.
type route struct {
	method, pattern string
	auth            auth
	summary         string
	request         any // a value of the request body's type, for the OpenAPI document
	response        any // a value of the response body's type
	status          int // success status
	sse             bool
	rawBody         bool // the handler bounds the body itself (uploads)
	app             bool // a web application's pages (an instance's Jupyter), not the API: see studio.CookieRefused
	watch           bool // a GET whose answer can be followed as server-sent events (watch.go)
	submit          bool // submits work to the route's {workspace}: limited by limits.submit_rate (limits.go)
	handler         func(w http.ResponseWriter, r *http.Request)
}

type ctxKey struct{}

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(ctxKey{}).(principal)
	return p
}

func (s *Server) mux() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		rt := rt
		mux.HandleFunc(rt.method+" "+rt.pattern, s.measure(rt, s.wrap(rt)))
	}
	s.studio.Register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, &api.Problem{Status: 404, Code: "RouteNotFound", Title: "Not Found",
			Detail: fmt.Sprintf("no route %s %s; see /v1/openapi.json for the API", r.Method, r.URL.Path)})
	})
	return mux
}

// wrap adds authentication, authorization, auditing, panic recovery and
// body limits to a handler.
func (s *Server) wrap(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("panic in handler", "route", rt.pattern, "panic", v, "stack", string(debug.Stack()))
				writeProblem(w, &api.Problem{Status: 500, Code: api.CodeInternal, Title: "Internal Server Error", Detail: "internal error; the server log has the details"})
			}
		}()
		if s.audited(rt, r) {
			rec := &statusRecorder{ResponseWriter: w}
			w = rec
			defer func() { s.audit.add(r, rt, rec.status) }()
		}
		if rt.auth != authPublic {
			if token, ok := studio.CookieToken(r); ok && r.Header.Get("Authorization") == "" {
				if why := s.studio.CookieRefused(r, token, rt.app); why != "" {
					writeProblem(w, &api.Problem{Status: 403, Code: "Forbidden", Title: "Forbidden", Detail: why})
					return
				}
			}
			p, err := s.authenticate(r)
			if err != nil && !errors.Is(err, errUnauthorized) {
				s.fail(w, r, err)
				return
			}
			if err != nil {
				writeProblem(w, &api.Problem{Status: 401, Code: api.CodeUnauthorized, Title: "Unauthorized", Detail: strings.TrimPrefix(err.Error(), "unauthorized: ")})
				return
			}
			r = r.WithContext(service.WithUser(context.WithValue(r.Context(), ctxKey{}, p), p.user))
			if err := s.authorize(r, rt, p); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		if rt.submit {
			if err := s.admitSubmission(r); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		if !rt.rawBody && !strings.HasSuffix(rt.pattern, "/artifacts") {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		if rt.watch && wantsEvents(r) {
			s.watch(w, r, rt.handler)
			return
		}
		rt.handler(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeJobList writes the jobs as an api.List without decoding and
// encoding their documents: each stored document gets its etag and, when
// queued, its queue position (what the store and the service keep beside
// it) added as its last members. The names and values are those the
// decoded job had (TestJobListAsStored); only the layout differs from
// writeJSON's: a job per line, as stored, not indented member by member
// (indenting 560 jobs cost more than reading them).
func writeJobList(w http.ResponseWriter, js []service.ListedJob) {
	n := len("{\n  \"value\": [\n  ]\n}\n")
	for _, j := range js {
		n += len(j.Doc) + 64
	}
	b := make([]byte, 0, n)
	b = append(b, "{\n  \"value\": ["...)
	for i, j := range js {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		doc := bytes.TrimSpace(j.Doc)
		b = append(b, doc[:len(doc)-1]...) // without its closing brace
		if len(doc) > 2 {
			b = append(b, ',')
		}
		if j.QueuePosition > 0 {
			b = append(b, `"queue_position":`...)
			b = strconv.AppendInt(b, int64(j.QueuePosition), 10)
			b = append(b, ',')
		}
		b = append(b, `"etag":`...)
		b = strconv.AppendQuote(b, j.Etag)
		b = append(b, '}')
	}
	if len(js) > 0 {
		b = append(b, "\n  "...)
	}
	b = append(b, "]\n}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	_, _ = w.Write(b)
}

func writeProblem(w http.ResponseWriter, p *api.Problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// fail writes err as a problem: service errors keep their status and code;
// anything else is a 500 whose details go to the log only.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p, retryAfter := s.problemOf(r, err)
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeProblem(w, p)
}

// problemOf is the problem err of request r is answered with, and the
// seconds its Retry-After says to wait (0: none).
func (s *Server) problemOf(r *http.Request, err error) (*api.Problem, int) {
	var se *service.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &se):
		p := &api.Problem{Status: se.Status, Code: se.Code, Detail: se.Msg, Field: se.Field, Errors: se.Fields, Limit: se.Limit, Workspace: se.Workspace}
		if se.RetryAfter > 0 {
			// Whole seconds, rounded up: a client that waits this long
			// finds room.
			p.RetryAfter = int((se.RetryAfter + time.Second - 1) / time.Second)
		}
		if se.Status == http.StatusTooManyRequests {
			s.stats.Refused(se.Workspace, se.Limit)
		}
		return p, p.RetryAfter
	case errors.As(err, &mbe):
		return &api.Problem{Status: 413, Code: "RequestTooLarge", Detail: fmt.Sprintf("request body larger than %d bytes", mbe.Limit)}, 0
	case errors.Is(err, store.ErrUnavailable):
		return &api.Problem{Status: 503, Code: "StoreUnavailable", Detail: "the store cannot be reached; retry shortly: " + err.Error()}, 1
	case noSpace(err):
		// Nothing was written; clients and agents retry (5xx), and the
		// server works again as soon as space frees.
		s.log.Error("data dir full", "method", r.Method, "path", r.URL.Path, "err", err)
		return &api.Problem{Status: 507, Code: "InsufficientStorage", Detail: fmt.Sprintf(
			"the server's data dir %s (or its store) has no space left on its disk, so nothing was written: %v; free some space there (tide recovers by itself) and retry", s.cfg.DataDir, err)}, 5
	case errors.Is(err, context.Canceled):
		return &api.Problem{Status: 499, Code: "Canceled", Detail: "request canceled"}, 0
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return &api.Problem{Status: 500, Code: api.CodeInternal, Detail: "internal error: " + err.Error()}, 0
	}
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// decodeStrict decodes a JSON body, rejecting unknown fields.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &service.Error{Status: 400, Code: api.CodeBadRequest, Msg: "request body: " + err.Error()}
	}
	return nil
}

func logRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Checked first: the arguments' boxing costs two allocations a
		// request even when the level is off (heartbeats: 1,000/s).
		if log.Enabled(r.Context(), slog.LevelDebug) {
			log.Debug("request", "method", r.Method, "path", r.URL.Path)
		}
		next.ServeHTTP(w, r)
	})
}

// noSpace reports whether err comes from a full disk: a write that failed
// with ENOSPC, SQLite's SQLITE_FULL or PostgreSQL's disk_full (53100).
func noSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "database or disk is full") || strings.Contains(msg, "no space left on device") ||
		strings.Contains(msg, "SQLSTATE 53100")
}
