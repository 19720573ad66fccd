package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/server"
	"github.com/tideml/tide/internal/service"
)

// accessLab is a server with workspaces ws1 and ws2, a user per built-in
// role in ws1, a user with no role, and the bootstrap admin.
type accessLab struct {
	srv    *server.Server
	h      http.Handler
	admin  string
	tokens map[string]string // role ("" for none) -> token
}

func newAccessLab(t *testing.T) *accessLab {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Store = testStore(t, dir)
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	lab := &accessLab{srv: srv, h: srv.Handler(), admin: srv.AdminToken, tokens: map[string]string{}}
	for _, ws := range []string{"ws1", "ws2"} {
		lab.must(t, lab.admin, "PUT", "/v1/workspaces/"+ws, `{}`, 201)
	}
	for i, role := range append([]string{""}, api.Roles...) {
		name := fmt.Sprintf("u%d", i)
		var nu api.NewUser
		lab.decode(t, lab.must(t, lab.admin, "POST", "/v1/users", `{"name":"`+name+`"}`, 201), &nu)
		if nu.Token == nil || nu.Token.Secret == "" {
			t.Fatalf("creating user %s gave no token: %+v", name, nu)
		}
		lab.tokens[role] = nu.Token.Secret
		if role != "" {
			lab.must(t, lab.admin, "POST", "/v1/workspaces/ws1/roles", `{"principal":"`+name+`","role":"`+role+`"}`, 201)
		}
	}
	return lab
}

func (l *accessLab) must(t *testing.T, token, method, path, body string, want int) []byte {
	t.Helper()
	rec := call(l.h, token, method, path, []byte(body))
	if rec.Code != want {
		t.Fatalf("%s %s = %d, want %d: %s", method, path, rec.Code, want, rec.Body)
	}
	return rec.Body.Bytes()
}

func (l *accessLab) decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// TestRouteRoleMatrix checks every route of the OpenAPI document (built
// from the route table, so a new route is checked without a change here)
// with every role: a route without an authorization rule fails; a role
// lacking the route's permission gets 403 naming the roles that have it,
// one holding it does not; a role in ws1 gives nothing in ws2; node tokens
// reach only agent routes and user tokens never reach them; no token is 401.
func TestRouteRoleMatrix(t *testing.T) {
	lab := newAccessLab(t)
	nodeToken := lab.srv.NodeToken("n-matrix")
	var doc struct {
		Paths map[string]map[string]struct {
			Auth string `json:"x-tide-auth"`
		} `json:"paths"`
	}
	lab.decode(t, lab.must(t, "", "GET", "/v1/openapi.json", "", 200), &doc)
	param := regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)
	checked := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			method = strings.ToUpper(method)
			concrete := func(ws string) string {
				return param.ReplaceAllStringFunc(path, func(m string) string {
					if m == "{workspace}" {
						return ws
					}
					return "x"
				})
			}
			p1 := concrete("ws1")
			try := func(token, p string) (int, string) {
				rec := call(lab.h, token, method, p, []byte("{}"))
				return rec.Code, rec.Body.String()
			}
			checked++
			switch {
			case op.Auth == "":
				t.Errorf("%s %s has no authorization rule", method, path)
			case op.Auth == "public":
				if code, body := try("", p1); code == 401 || code == 403 {
					t.Errorf("public %s %s without a token = %d %s", method, path, code, body)
				}
			case op.Auth == "node":
				for role, tok := range lab.tokens {
					if code, _ := try(tok, p1); code != 403 {
						t.Errorf("%s %s (agents only) with a %q user token = %d, want 403", method, path, role, code)
					}
				}
				if code, _ := try(lab.admin, p1); code != 403 {
					t.Errorf("%s %s (agents only) with the admin token = %d, want 403", method, path, code)
				}
				if code, body := try(nodeToken, p1); code == 401 {
					t.Errorf("%s %s with a node token = 401: %s", method, path, body)
				}
			default:
				if code, _ := try(nodeToken, p1); code != 403 {
					t.Errorf("%s %s with a node token = %d, want 403", method, path, code)
				}
				if code, _ := try("", p1); code != 401 {
					t.Errorf("%s %s without a token = %d, want 401", method, path, code)
				}
				if code, body := try(lab.admin, p1); (code == 401 || code == 403) != (op.Auth == "job-identity") {
					t.Errorf("%s %s as admin = %d %s", method, path, code, body)
				}
				for role, tok := range lab.tokens {
					want403 := false
					switch {
					case op.Auth == "signed-in":
					case op.Auth == "server-admin", op.Auth == "job-identity":
						want403 = true
					case strings.HasPrefix(op.Auth, "ws:"):
						want403 = !service.Allows(role, service.Perm(strings.TrimPrefix(op.Auth, "ws:")))
						if strings.Contains(path, "{workspace}") {
							if code, _ := try(tok, concrete("ws2")); code != 403 {
								t.Errorf("%s %s in ws2 as %q of ws1 = %d, want 403", method, path, role, code)
							}
						}
					default:
						t.Errorf("%s %s: unknown rule %q", method, path, op.Auth)
					}
					code, body := try(tok, p1)
					if want403 && code != 403 {
						t.Errorf("%s %s as %q = %d, want 403", method, path, role, code)
					}
					if !want403 && (code == 403 || code == 401) {
						t.Errorf("%s %s as %q = %d, want allowed: %s", method, path, role, code, body)
					}
					if want403 && strings.HasPrefix(op.Auth, "ws:") && !strings.Contains(body, service.RolesWith(service.Perm(strings.TrimPrefix(op.Auth, "ws:")))[0]) {
						t.Errorf("%s %s as %q: the 403 does not name the role needed: %s", method, path, role, body)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d operations checked", checked)
	}
}

// TestNodeTokenOnlyItsOwnJobs: a node token may report only on jobs its
// node runs (or, for late log lines, of its node's compute), and read only
// its own workspace's datastores.
func TestNodeTokenOnlyItsOwnJobs(t *testing.T) {
	lab := newAccessLab(t)
	lab.must(t, lab.admin, "PUT", "/v1/workspaces/ws1/computes/cpu-one", "name: cpu-one\ntype: amlcompute\nmax_instances: 1\n", 201)
	var j api.Job
	lab.decode(t, lab.must(t, lab.admin, "POST", "/v1/workspaces/ws1/jobs", "name: j1\ncommand: echo hi\ncompute: cpu-one\n", 201), &j)
	stranger := lab.srv.NodeToken("stranger-node")
	id := "ws1%2Fj1%2F1"
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/agent/assignments/" + id + "/logs", `{"lines":[{"node_seq":1,"text":"forged"}]}`},
		{"GET", "/v1/agent/assignments/" + id + "/checkpoint", ""},
		{"PUT", "/v1/agent/assignments/" + id + "/checkpoint", "x"},
		{"PUT", "/v1/agent/assignments/" + id + "/artifacts", "x"},
		{"GET", "/v1/agent/workspaces/ws1/datastores/workspaceblobstore", ""},
	} {
		rec := call(lab.h, stranger, c.method, c.path, []byte(c.body))
		if rec.Code != 403 {
			t.Errorf("%s %s with another node's token = %d %s, want 403", c.method, c.path, rec.Code, rec.Body)
		}
	}
	var lines api.List[api.LogLine]
	lab.decode(t, lab.must(t, lab.admin, "GET", "/v1/workspaces/ws1/jobs/j1/logs", "", 200), &lines)
	if len(lines.Value) != 0 {
		t.Errorf("a stranger node's lines were stored: %+v", lines.Value)
	}
}
