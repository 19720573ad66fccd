package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// accessRoutes manage users, identities, tokens, roles, secrets and the
// audit log.
func (s *Server) accessRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: "/v1/users", auth: authServerAdmin, summary: "List users and identities (filter: kind=user|identity)", response: api.List[api.User]{}, handler: s.listUsers},
		{method: "POST", pattern: "/v1/users", auth: authServerAdmin, summary: "Create a user (answer: the user and its first token, shown once) or an identity (kind: identity)", request: api.User{}, response: api.NewUser{}, status: 201, handler: s.createUser},
		{method: "DELETE", pattern: "/v1/users/{user}", auth: authServerAdmin, summary: "Delete a user or identity with its tokens and roles", status: 204, handler: s.deleteUser},

		{method: "GET", pattern: "/v1/tokens", auth: authSignedIn, summary: "List your tokens (admins: all=true lists everyone's)", response: api.List[api.Token]{}, handler: s.listTokens},
		{method: "POST", pattern: "/v1/tokens", auth: authSignedIn, summary: "Create a token for yourself (admins: for any user); the secret is shown once", request: api.TokenRequest{}, response: api.Token{}, status: 201, handler: s.createToken},
		{method: "DELETE", pattern: "/v1/tokens/{id}", auth: authSignedIn, summary: "Revoke one of your tokens (admins: anyone's)", status: 204, handler: s.revokeToken},

		{method: "GET", pattern: "/v1/roles", auth: authSignedIn, summary: "List role assignments in every workspace you have a role in (admins: all)", response: api.List[api.RoleAssignment]{}, handler: s.listAllRoles},
		{method: "GET", pattern: ws + "/roles", auth: can(service.PermWorkspaceRead), summary: "List the workspace's role assignments", response: api.List[api.RoleAssignment]{}, handler: s.listRoles},
		{method: "POST", pattern: ws + "/roles", auth: can(service.PermRolesWrite), summary: "Give a user or identity a role in the workspace (replacing the one it had)", request: api.RoleAssignment{}, response: api.RoleAssignment{}, status: 201, handler: s.assignRole},
		{method: "DELETE", pattern: ws + "/roles/{principal...}", auth: can(service.PermRolesWrite), summary: "Take a user's or identity's role in the workspace away", status: 204, handler: s.removeRole},

		{method: "GET", pattern: ws + "/secrets", auth: can(service.PermSecretsList), summary: "List the workspace's secrets (names only: values are never returned)", response: api.List[api.Secret]{}, handler: s.listSecrets},
		{method: "PUT", pattern: ws + "/secrets/{name}", auth: can(service.PermSecretsWrite), summary: "Set a secret (jobs use it as ${{secrets.NAME}} in environment_variables)", request: api.Secret{}, response: api.Secret{}, status: 201, handler: s.setSecret},
		{method: "DELETE", pattern: ws + "/secrets/{name}", auth: can(service.PermSecretsWrite), summary: "Delete a secret", status: 204, handler: s.deleteSecret},
		{method: "POST", pattern: "/v1/secret-key/rotate", auth: authServerAdmin, summary: "Replace the server's secret key, sealing every workspace secret and datastore credential again with the new one", response: api.SecretKeyRotation{}, handler: s.rotateSecretKey},

		{method: "GET", pattern: "/v1/audit", auth: authServerAdmin, summary: "The audit log, newest first (filters: user, since=RFC 3339 or 7d/24h, limit)", response: api.List[api.AuditEntry]{}, handler: s.listAudit},
	}
}

func decodeBody(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeStrict(b, v)
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) {
	us, err := s.svc.Users(r.Context(), r.URL.Query().Get("kind"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(us))
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request) {
	var u api.User
	if err := decodeBody(r, &u); err != nil {
		s.fail(w, r, err)
		return
	}
	out, tok, err := s.svc.CreateUser(r.Context(), u)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.access.forget()
	writeJSON(w, 201, api.NewUser{User: out, Token: tok})
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteUser(r.Context(), r.PathValue("user")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.access.forget()
	w.WriteHeader(204)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	user := p.user
	if r.URL.Query().Get("all") == "true" {
		if !p.admin {
			s.fail(w, r, &service.Error{Status: 403, Code: "Forbidden", Msg: "listing everyone's tokens needs a server admin"})
			return
		}
		user = ""
	}
	ts, err := s.svc.Tokens(r.Context(), user)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ts))
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var req api.TokenRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	p := principalOf(r)
	if p.kind != api.PrincipalUser {
		s.fail(w, r, &service.Error{Status: 403, Code: "Forbidden", Msg: "a job's identity token cannot create API tokens"})
		return
	}
	if req.User == "" {
		req.User = p.user
	}
	if req.User != p.user && !p.admin {
		s.fail(w, r, &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf("creating a token for %s needs a server admin; you may create tokens for yourself (%s)", req.User, p.user)})
		return
	}
	t, err := s.svc.CreateToken(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 201, t)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	owner := p.user
	if p.admin {
		owner = ""
	}
	if _, err := s.svc.RevokeToken(r.Context(), r.PathValue("id"), owner); err != nil {
		s.fail(w, r, err)
		return
	}
	s.access.forget()
	w.WriteHeader(204)
}

func (s *Server) listAllRoles(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	all, err := s.svc.RoleAssignments(r.Context(), "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if p.admin {
		writeJSON(w, 200, list(all))
		return
	}
	mine := map[string]bool{}
	for _, ra := range all {
		if ra.Principal == p.user {
			mine[ra.Workspace] = true
		}
	}
	var out []api.RoleAssignment
	for _, ra := range all {
		if mine[ra.Workspace] {
			out = append(out, ra)
		}
	}
	writeJSON(w, 200, list(out))
}

func (s *Server) listRoles(w http.ResponseWriter, r *http.Request) {
	ras, err := s.svc.RoleAssignments(r.Context(), r.PathValue("workspace"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ras))
}

func (s *Server) assignRole(w http.ResponseWriter, r *http.Request) {
	var ra api.RoleAssignment
	if err := decodeBody(r, &ra); err != nil {
		s.fail(w, r, err)
		return
	}
	ra.Workspace = r.PathValue("workspace")
	out, err := s.svc.AssignRole(r.Context(), ra)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.access.forget()
	writeJSON(w, 201, out)
}

func (s *Server) removeRole(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.RemoveRole(r.Context(), r.PathValue("workspace"), r.PathValue("principal")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.access.forget()
	w.WriteHeader(204)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	ss, err := s.svc.Secrets(r.Context(), r.PathValue("workspace"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(ss))
}

func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	var sec api.Secret
	if err := decodeBody(r, &sec); err != nil {
		s.fail(w, r, err)
		return
	}
	sec.Workspace, sec.Name = r.PathValue("workspace"), r.PathValue("name")
	out, err := s.svc.SetSecret(r.Context(), sec)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 201, out)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteSecret(r.Context(), r.PathValue("workspace"), r.PathValue("name")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}

func (s *Server) rotateSecretKey(w http.ResponseWriter, r *http.Request) {
	out, err := s.svc.RotateSecretKey(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, out)
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.AuditFilter{User: q.Get("user")}
	if v := q.Get("since"); v != "" {
		since, err := parseSince(v, s.now())
		if err != nil {
			s.fail(w, r, &service.Error{Status: 400, Code: api.CodeValidation, Field: "since", Msg: err.Error()})
			return
		}
		f.Since = since
	}
	if v := q.Get("limit"); v != "" {
		if _, err := fmt.Sscan(v, &f.Limit); err != nil || f.Limit < 0 {
			s.fail(w, r, &service.Error{Status: 400, Code: api.CodeValidation, Field: "limit", Msg: "limit: a number of entries, such as 100"})
			return
		}
	}
	s.audit.flush(r.Context())
	es, err := s.svc.Audit(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, list(es))
}

// parseSince reads an RFC 3339 time or a duration back from now (7d, 24h).
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := service.ParseExpiry(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q: use an RFC 3339 time or a duration such as 7d or 24h", v)
	}
	return now.Add(-d), nil
}

// mayCancel lets a job's submitter cancel it; others need a role that
// cancels anyone's jobs (Contributor, Owner).
func (s *Server) mayCancel(r *http.Request) error {
	p := principalOf(r)
	ws := r.PathValue("workspace")
	if p.admin || p.jobAdmin {
		return nil
	}
	j, err := s.svc.Job(r.Context(), ws, r.PathValue("name"))
	if err != nil {
		return err
	}
	if j.CreatedBy != "" && j.CreatedBy == p.user {
		return nil
	}
	if err := s.allowed(r.Context(), p, ws, service.PermJobsCancelAny); err != nil {
		return &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf("job %s was submitted by %s; only its submitter or one of %v may cancel it",
			j.Name, orSomeone(j.CreatedBy), service.RolesWith(service.PermJobsCancelAny))}
	}
	return nil
}

func orSomeone(u string) string {
	if u == "" {
		return "another user"
	}
	return u
}
