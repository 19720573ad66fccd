package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/studio"
)

// principal is who a request comes from: a user, an identity (a job's
// token) or a node's agent.
type principal struct {
	kind  string // api.PrincipalUser, api.PrincipalIdentity or "node"
	user  string // the user's or identity's name
	admin bool
	node  string // the node a node token belongs to
	// job is the attempt an identity token was minted for
	// ("WORKSPACE/JOB/ATTEMPT"); its workspace bounds what it may do.
	job string
	// jobAdmin: a job acting as its submitter, a server admin, may do
	// everything in its own workspace (but nothing server-wide).
	jobAdmin bool
	// token is the hash of the user token used, for last-use records.
	token string
}

// errUnauthorized marks authentication failures (401); other errors from
// authenticate are the store's.
var errUnauthorized = errors.New("unauthorized")

// cacheTTL bounds how long a replica trusts what it read about a token or
// a role: a revocation or role change made on another replica takes effect
// here within it (on this replica, at once).
const cacheTTL = 5 * time.Second

type cached[T any] struct {
	v  T
	at time.Time
}

// accessCache remembers tokens and roles for cacheTTL.
type accessCache struct {
	mu     sync.Mutex
	tokens map[string]cached[*store.Token] // hash -> token (nil: no such token)
	users  map[string]cached[*api.User]
	roles  map[string]cached[string] // workspace/principal -> role
	used   map[string]time.Time      // hash -> last use recorded
}

func newAccessCache() *accessCache {
	return &accessCache{tokens: map[string]cached[*store.Token]{}, users: map[string]cached[*api.User]{},
		roles: map[string]cached[string]{}, used: map[string]time.Time{}}
}

// forget drops everything: called after any change to users, tokens or
// roles made on this replica.
func (c *accessCache) forget() {
	c.mu.Lock()
	clear(c.tokens)
	clear(c.users)
	clear(c.roles)
	c.mu.Unlock()
}

func lookup[T any](c *accessCache, m map[string]cached[T], key string, now time.Time, load func() (T, error)) (T, error) {
	c.mu.Lock()
	e, ok := m[key]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < cacheTTL {
		return e.v, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	m[key] = cached[T]{v: v, at: now}
	c.mu.Unlock()
	return v, nil
}

func (s *Server) now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock().UTC()
	}
	return time.Now().UTC()
}

func (s *Server) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if v := r.Header.Get("X-IDENTITY-HEADER"); h == "" && v != "" {
		h = "Bearer " + v // Azure's managed identity protocol
	}
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if h == "" {
		// Studio's session cookie holds the same kind of token, so the
		// route's rule applies to Studio as to the CLI.
		secret, ok = studio.CookieToken(r)
	}
	if !ok || secret == "" {
		return principal{}, fmt.Errorf("%w: missing 'Authorization: Bearer <token>'; the server wrote a token to the CLI config on its first start (or set TIDE_TOKEN)", errUnauthorized)
	}
	if id, ok := s.checkNodeToken(secret); ok {
		return principal{kind: "node", node: id}, nil
	}
	if strings.HasPrefix(secret, identityTokenPrefix) {
		return s.identityPrincipal(r.Context(), secret)
	}
	ctx, now := r.Context(), s.now()
	hash := service.HashToken(secret)
	t, err := lookup(s.access, s.access.tokens, hash, now, func() (*store.Token, error) {
		var t *store.Token
		err := s.store.View(ctx, func(tx store.Tx) (err error) {
			t, err = tx.GetToken(ctx, hash)
			return err
		})
		if store.IsNotFound(err) {
			return nil, nil
		}
		return t, err
	})
	if err != nil {
		return principal{}, fmt.Errorf("reading token: %w", err)
	}
	if t == nil {
		return principal{}, fmt.Errorf("%w: invalid or revoked token; ask an admin for a new one ('tide token create')", errUnauthorized)
	}
	if !t.Expires.IsZero() && !now.Before(t.Expires) {
		return principal{}, fmt.Errorf("%w: token expired on %s; create a new one with 'tide token create'", errUnauthorized, t.Expires.Format(time.RFC3339))
	}
	name := service.TokenUser(t)
	u, err := s.user(ctx, name, now)
	if err != nil {
		return principal{}, err
	}
	if u == nil {
		return principal{}, fmt.Errorf("%w: the token's user %s was deleted", errUnauthorized, name)
	}
	s.audit.touch(hash, now)
	return principal{kind: api.PrincipalUser, user: name, admin: u.Admin, token: hash}, nil
}

func (s *Server) user(ctx context.Context, name string, now time.Time) (*api.User, error) {
	return lookup(s.access, s.access.users, name, now, func() (*api.User, error) {
		u, err := s.svc.User(ctx, name)
		if err != nil && errorStatus(err) == 404 {
			return nil, nil
		}
		return u, err
	})
}

// roleOf is a principal's role in a workspace, "" for none.
func (s *Server) roleOf(ctx context.Context, workspace, principal string) (string, error) {
	return lookup(s.access, s.access.roles, workspace+"/"+principal, s.now(), func() (string, error) {
		return s.svc.RoleOf(ctx, workspace, principal)
	})
}

// authorize decides whether p may call rt, and says what is missing when
// it may not.
func (s *Server) authorize(r *http.Request, rt route, p principal) error {
	forbid := func(format string, args ...any) error {
		return &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case rt.auth == authNode && p.kind != "node":
		return forbid("%s is for agents (a node token); a user token may not call it", rt.pattern)
	case rt.auth == authNode:
		return nil
	case p.kind == "node":
		return forbid("a node token may call only agent routes (/v1/agent/...), not %s", rt.pattern)
	case rt.auth == authSignedIn:
		return nil
	case rt.auth == authJobIdentity:
		if p.job != "" {
			return nil
		}
		return forbid("%s is for a running job's identity token (TIDE_IDENTITY_TOKEN); users create tokens with 'tide token create'", rt.pattern)
	case rt.auth == authServerAdmin:
		if p.admin {
			return nil
		}
		return forbid("%s needs a server admin; %s is not one", rt.pattern, p.user)
	}
	perm, ok := rt.auth.perm()
	if !ok {
		return forbid("route %s has no authorization rule", rt.pattern)
	}
	return s.allowed(r.Context(), p, r.PathValue("workspace"), perm)
}

// allowed checks that p holds perm in workspace.
func (s *Server) allowed(ctx context.Context, p principal, workspace string, perm service.Perm) error {
	if p.job != "" && !strings.HasPrefix(p.job, workspace+"/") {
		return &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf("a job's identity token may act only in its own workspace, not %s", workspace)}
	}
	if p.admin || p.jobAdmin {
		return nil
	}
	role, err := s.roleOf(ctx, workspace, p.user)
	if err != nil {
		return err
	}
	if service.Allows(role, perm) {
		return nil
	}
	has := "no role"
	if role != "" {
		has = "the role " + role
	}
	return &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf("%s has %s in workspace %s; this needs %s (one of: %s)",
		p.user, has, workspace, perm, strings.Join(service.RolesWith(perm), ", "))}
}

func errorStatus(err error) int {
	var se *service.Error
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

// statusRecorder keeps the status a handler wrote, for the audit log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
