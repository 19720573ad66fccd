package server

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/studio"
)

// instanceRoutes are the verbs of compute instances and the proxy to
// their Jupyter servers.
func (s *Server) instanceRoutes(ws string) []route {
	routes := []route{
		{method: "POST", pattern: ws + "/computes/{name}/start", auth: can(service.PermComputesOperate), summary: "Start a compute instance", response: api.Compute{}, status: 202, handler: s.instanceOp(api.OperationStart)},
		{method: "POST", pattern: ws + "/computes/{name}/stop", auth: can(service.PermComputesOperate), summary: "Stop a compute instance (its disk is kept)", response: api.Compute{}, status: 202, handler: s.instanceOp(api.OperationStop)},
		{method: "POST", pattern: ws + "/computes/{name}/restart", auth: can(service.PermComputesOperate), summary: "Restart a compute instance", response: api.Compute{}, status: 202, handler: s.instanceOp(api.OperationRestart)},
		{method: "POST", pattern: "/v1/agent/setup", auth: authNode, summary: "Agent: a compute instance's setup script ran", request: api.SetupReport{}, status: 204, handler: s.agentSetup},
	}
	// Jupyter's own API and pages, WebSockets included (kernels' channels).
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		routes = append(routes, route{method: m, pattern: ws + "/instances/{name}/jupyter/{path...}", auth: can(service.PermComputesOperate), rawBody: true, app: true,
			summary: "Jupyter on a compute instance, proxied (WebSockets included)", handler: s.jupyterProxy})
	}
	return routes
}

func (s *Server) instanceOp(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.mayUseInstance(r); err != nil {
			s.fail(w, r, err)
			return
		}
		c, err := s.svc.InstanceOperation(r.Context(), r.PathValue("workspace"), r.PathValue("name"), op)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("ETag", c.Etag)
		writeJSON(w, 202, c)
	}
}

func (s *Server) agentSetup(w http.ResponseWriter, r *http.Request) {
	var rep api.SetupReport
	b, err := readBody(r)
	if err == nil {
		err = decodeStrict(b, &rep)
	}
	if err == nil {
		err = s.svc.ReportSetup(r.Context(), principalOf(r).node, rep)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(204)
}

// jupyterProxy forwards a request to the instance's Jupyter server, which
// serves under the same path (its base_url). The caller's tide token
// stays here: Jupyter gets its own token instead.
func (s *Server) jupyterProxy(w http.ResponseWriter, r *http.Request) {
	if err := s.mayUseInstance(r); err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.svc.Jupyter(r.Context(), r.PathValue("workspace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	target := &url.URL{Scheme: "http", Host: t.Address}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = r.URL.Path, r.URL.RawPath
			pr.Out.Header.Set("Authorization", "token "+t.Token)
			// Nor does Studio's session cookie reach the node.
			studio.StripCookie(pr.Out)
			// Jupyter checks a WebSocket's Origin against its own host.
			pr.Out.Header.Del("Origin")
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, &api.Problem{Status: 502, Code: "BadGateway", Title: "Bad Gateway",
				Detail: "the instance's Jupyter server did not answer (" + err.Error() + "); it may be starting or have exited: see the instance's node folder, jupyter.log"})
		},
	}
	p.ServeHTTP(w, r)
}

// mayUseInstance refuses a compute instance assigned to another user
// (create_on_behalf_of, whose user_object_id names a tide user): only
// that user, the workspace's Owners and server admins may start, stop,
// restart, SSH into or open Jupyter on it. Other computes pass.
func (s *Server) mayUseInstance(r *http.Request) error {
	p := principalOf(r)
	ws, name := r.PathValue("workspace"), r.PathValue("name")
	if p.admin || p.jobAdmin {
		return nil
	}
	c, err := s.svc.Compute(r.Context(), ws, name)
	if err != nil || c.Instance == nil || c.CreateOnBehalfOf == nil {
		return nil // the handler reports a missing compute
	}
	owner := c.CreateOnBehalfOf.UserObjectID
	if p.user == owner {
		return nil
	}
	if role, err := s.roleOf(r.Context(), ws, p.user); err == nil && role == api.RoleOwner {
		return nil
	}
	return &service.Error{Status: 403, Code: "Forbidden", Msg: fmt.Sprintf("compute instance %s is assigned to %s (create_on_behalf_of); only %s, an Owner of workspace %s or a server admin may use it",
		name, owner, owner, ws)}
}
