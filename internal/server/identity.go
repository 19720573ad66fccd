package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// identityTokenPrefix starts a job's identity token: "idt.<claims>.<mac>",
// signed with the server's key like node tokens. Nothing is stored: a token
// is good until it expires and only while its job attempt runs.
const identityTokenPrefix = "idt."

// identityTTL is an identity token's life; a job fetches a fresh one from
// IDENTITY_ENDPOINT before it ends.
const identityTTL = time.Hour

type identityClaims struct {
	Workspace string `json:"w"`
	Job       string `json:"j"`
	Attempt   int    `json:"a"`
	Principal string `json:"p"`
	Expires   int64  `json:"e"`
}

func (s *Server) signIdentity(payload string) string {
	m := hmac.New(sha256.New, s.nodeKey)
	m.Write([]byte("identity:" + payload))
	return hex.EncodeToString(m.Sum(nil))
}

// IdentityToken mints the token a job attempt acts with as principal.
func (s *Server) IdentityToken(workspace, job string, attempt int, principal string) string {
	c := identityClaims{Workspace: workspace, Job: job, Attempt: attempt, Principal: principal, Expires: s.now().Add(identityTTL).Unix()}
	b, _ := json.Marshal(c)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return identityTokenPrefix + payload + "." + s.signIdentity(payload)
}

func (s *Server) identityClaims(secret string) (identityClaims, error) {
	var c identityClaims
	payload, mac, ok := strings.Cut(strings.TrimPrefix(secret, identityTokenPrefix), ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.signIdentity(payload))) {
		return c, fmt.Errorf("%w: invalid identity token", errUnauthorized)
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return c, fmt.Errorf("%w: invalid identity token", errUnauthorized)
	}
	return c, nil
}

// identityPrincipal checks a job's identity token: signed here, not
// expired, and its attempt still the job's current one and not finished.
func (s *Server) identityPrincipal(ctx context.Context, secret string) (principal, error) {
	c, err := s.identityClaims(secret)
	if err != nil {
		return principal{}, err
	}
	if exp := time.Unix(c.Expires, 0); !s.now().Before(exp) {
		return principal{}, fmt.Errorf("%w: identity token expired on %s; fetch a fresh one from IDENTITY_ENDPOINT", errUnauthorized, exp.UTC().Format(time.RFC3339))
	}
	j, err := s.svc.Job(ctx, c.Workspace, c.Job)
	if err != nil && errorStatus(err) != 404 {
		return principal{}, err
	}
	if j == nil || j.Attempt != c.Attempt || api.JobTerminal(j.Status) || j.Status == api.JobQueued {
		return principal{}, fmt.Errorf("%w: identity token of job %s attempt %d, which is no longer running", errUnauthorized, c.Job, c.Attempt)
	}
	p := principal{kind: api.PrincipalIdentity, user: c.Principal, job: fmt.Sprintf("%s/%s/%d", c.Workspace, c.Job, c.Attempt)}
	if !strings.HasPrefix(c.Principal, "compute:") {
		u, err := s.user(ctx, c.Principal, s.now())
		if err != nil {
			return principal{}, err
		}
		if u == nil {
			return principal{}, fmt.Errorf("%w: identity %s no longer exists", errUnauthorized, c.Principal)
		}
		p.kind, p.jobAdmin = u.Kind, u.Admin
	}
	return p, nil
}

// identityRoutes serve jobs' identity tokens, the way Azure's managed
// identity endpoint does (IDENTITY_ENDPOINT, X-IDENTITY-HEADER), so that
// code written for Azure's ManagedIdentityCredential works unchanged.
func (s *Server) identityRoutes() []route {
	return []route{
		{method: "GET", pattern: "/v1/identity/token", auth: authJobIdentity, summary: "A job's identity: a fresh token for the running attempt (send the current one as Bearer or X-IDENTITY-HEADER)", response: api.IdentityToken{}, handler: s.identityToken},
		{method: "GET", pattern: "/v1/whoami", auth: authSignedIn, summary: "Who the token signs in, and its roles", response: api.WhoAmI{}, handler: s.whoami},
	}
}

func (s *Server) identityToken(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	var ws, job string
	var attempt int
	parts := strings.Split(p.job, "/")
	ws, job = parts[0], parts[1]
	fmt.Sscan(parts[2], &attempt)
	tok := s.IdentityToken(ws, job, attempt, p.user)
	writeJSON(w, 200, api.IdentityToken{AccessToken: tok, TokenType: "Bearer", ExpiresOn: s.now().Add(identityTTL).Unix(),
		Resource: r.URL.Query().Get("resource"), ClientID: p.user})
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	out := api.WhoAmI{User: p.user, Kind: p.kind, Admin: p.admin}
	if p.job != "" {
		out.Job = p.job
	}
	ras, err := s.svc.RoleAssignments(r.Context(), "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, ra := range ras {
		if ra.Principal == p.user {
			if out.Roles == nil {
				out.Roles = map[string]string{}
			}
			out.Roles[ra.Workspace] = ra.Role
			if out.Permissions == nil {
				out.Permissions = map[string][]string{}
			}
			for _, perm := range service.PermsOf(ra.Role) {
				out.Permissions[ra.Workspace] = append(out.Permissions[ra.Workspace], string(perm))
			}
		}
	}
	writeJSON(w, 200, out)
}

// jobPrincipal is who a job attempt acts as (service.JobPrincipal), as a
// token for the agent to hand to the job; "" when it acts as nobody.
func (s *Server) jobIdentityToken(j *api.Job, c *api.Compute) string {
	p := service.JobPrincipal(j, c)
	if p == "" {
		return ""
	}
	return s.IdentityToken(j.Workspace, j.Name, j.Attempt, p)
}
