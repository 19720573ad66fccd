package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/server"
)

// newHandler returns the API handler of a server on a fresh data dir and
// its admin token. No controller runs: these tests exercise the HTTP layer.
func newHandler(t testing.TB) (http.Handler, string) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Store = testStore(t, dir)
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return srv.Handler(), srv.AdminToken
}

func call(h http.Handler, token, method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestOpenAPIMatchesRoutes checks that every operation the OpenAPI document
// describes is served, and that unknown routes are not.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	h, token := newHandler(t)
	rec := call(h, "", "GET", "/v1/openapi.json", nil)
	if rec.Code != 200 {
		t.Fatalf("openapi: %d", rec.Code)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi version %q", doc.OpenAPI)
	}
	param := regexp.MustCompile(`\{[a-z]+\}`)
	ops := 0
	for path, methods := range doc.Paths {
		concrete := param.ReplaceAllString(path, "x")
		for method := range methods {
			ops++
			rec := call(h, token, strings.ToUpper(method), concrete, []byte("{}"))
			var p api.Problem
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			if p.Code == "RouteNotFound" || rec.Code == http.StatusMethodNotAllowed {
				t.Errorf("%s %s is documented but not served (%d %s)", method, path, rec.Code, p.Code)
			}
		}
	}
	if ops < 25 {
		t.Errorf("only %d operations documented", ops)
	}
	for _, undocumented := range []string{"/v1/nothing", "/v1/workspaces/default/widgets"} {
		rec := call(h, token, "GET", undocumented, nil)
		if rec.Code != 404 {
			t.Errorf("GET %s = %d, want 404", undocumented, rec.Code)
		}
	}
}

func TestAuthRequired(t *testing.T) {
	h, token := newHandler(t)
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {token, 200}} {
		if rec := call(h, tc.token, "GET", "/v1/workspaces/default/computes", nil); rec.Code != tc.want {
			t.Errorf("token %q: %d, want %d", tc.token, rec.Code, tc.want)
		}
	}
	if rec := call(h, token, "POST", "/v1/agent/heartbeat", []byte("{}")); rec.Code != 403 {
		t.Errorf("admin token on the agent API: %d, want 403", rec.Code)
	}
	if rec := call(h, "", "GET", "/livez", nil); rec.Code != 200 {
		t.Errorf("livez: %d", rec.Code)
	}
}

// TestComputeFilesThroughAPI sends every real Azure ML compute file to the
// API as YAML: amlcompute files are created, the others rejected clearly.
func TestComputeFilesThroughAPI(t *testing.T) {
	h, token := newHandler(t)
	// The identity Azure's cluster-user-identity.yml names.
	if rec := call(h, token, "POST", "/v1/users", []byte(`{"name":"identity_resource_id","kind":"identity"}`)); rec.Code != 201 {
		t.Fatalf("creating the identity: %d %s", rec.Code, rec.Body)
	}
	files, _ := filepath.Glob(filepath.Join(examples, "resources/compute/*.yml"))
	if len(files) < 10 {
		t.Fatalf("found %d compute files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := regexp.MustCompile(`(?m)^name: *(\S+)`).FindSubmatch(b)
		rec := call(h, token, "PUT", "/v1/workspaces/default/computes/"+string(name[1]), b)
		base := filepath.Base(f)
		if strings.HasPrefix(base, "cluster-") || strings.HasPrefix(base, "instance-") {
			if rec.Code != 201 && rec.Code != 200 {
				t.Errorf("%s: %d %s", base, rec.Code, rec.Body)
			}
			continue
		}
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "not supported") {
			t.Errorf("%s: %d %s, want 400 not supported", base, rec.Code, rec.Body)
		}
	}
	rec := call(h, token, "GET", "/v1/workspaces/default/computes/ssh-example", nil)
	if strings.Contains(rec.Body.String(), "example-password") {
		t.Errorf("a secret was returned: %s", rec.Body)
	}
	var c api.Compute
	if err := json.Unmarshal(call(h, token, "GET", "/v1/workspaces/default/computes/basic-example", nil).Body.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Size != "Standard_DS3_v2" || c.MaxInstances != 2 || c.IdleTimeBeforeScaleDown != 120 || c.Tier != "dedicated" || c.Location != "local" || c.Identity == nil {
		t.Errorf("basic-example: %+v", c)
	}
	// Size cannot change after creation.
	rec = call(h, token, "PUT", "/v1/workspaces/default/computes/basic-example", []byte("name: basic-example\ntype: amlcompute\nsize: Standard_D4s_v5\n"))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "size") {
		t.Errorf("size change: %d %s", rec.Code, rec.Body)
	}
	// Quota: a cluster that reserves more than the family's limit.
	rec = call(h, token, "PUT", "/v1/workspaces/default/computes/huge", []byte("name: huge\ntype: amlcompute\nsize: Standard_ND96asr_v4\nmax_instances: 100\n"))
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), "QuotaExceeded") {
		t.Errorf("over quota: %d %s", rec.Code, rec.Body)
	}
}

// FuzzComputeRequest sends arbitrary bodies to the compute and job
// endpoints: no input may crash the server or make it answer 5xx.
func FuzzComputeRequest(f *testing.F) {
	f.Add([]byte("name: a-b\ntype: amlcompute\n"), false)
	f.Add([]byte(`{"name":"abc","type":"amlcompute","max_instances":"x"}`), false)
	f.Add([]byte("command: echo ${{inputs.x}}\ninputs:\n  x: 1\n"), true)
	f.Add([]byte("\x00\xff{[}"), true)
	// The server's data dir in memory (/dev/shm) where there is one: the
	// bodies the fuzzer finds valid are stored, and a SQLite commit's fsync
	// on a disk other work shares held the fuzzer to ~150 inputs/s.
	if _, err := os.Stat("/dev/shm"); err == nil {
		f.Setenv("TMPDIR", "/dev/shm")
	}
	h, token := newHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, job bool) {
		path := "/v1/workspaces/default/computes/fuzz-a"
		method := "PUT"
		if job {
			path, method = "/v1/workspaces/default/jobs", "POST"
		}
		rec := call(h, token, method, path, body)
		if rec.Code >= 500 {
			t.Fatalf("%s %s with %q: %d %s", method, path, body, rec.Code, rec.Body)
		}
	})
}

// TestIfMatch checks optimistic concurrency: every write that names the
// version it read (If-Match) fails with 412 when the resource changed since.
func TestIfMatch(t *testing.T) {
	h, token := newHandler(t)
	put := call(h, token, "PUT", "/v1/workspaces/default/computes/etag-cluster", []byte("name: etag-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\n"))
	if put.Code != 201 || put.Header().Get("ETag") == "" {
		t.Fatalf("create: %d %s (ETag %q)", put.Code, put.Body, put.Header().Get("ETag"))
	}
	v1 := put.Header().Get("ETag")
	if got := call(h, token, "GET", "/v1/workspaces/default/computes/etag-cluster", nil).Header().Get("ETag"); got != v1 {
		t.Fatalf("GET ETag %q, want %q", got, v1)
	}
	withEtag := func(method, path, etag string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("If-Match", etag)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const path = "/v1/workspaces/default/computes/etag-cluster"
	ok := withEtag("PATCH", path, v1, []byte(`{"max_instances": 3}`))
	if ok.Code != 200 || ok.Header().Get("ETag") == v1 {
		t.Fatalf("PATCH with the current etag: %d %s", ok.Code, ok.Body)
	}
	for _, tc := range []struct {
		method, path string
		body         []byte
	}{
		{"PATCH", path, []byte(`{"max_instances": 4}`)},
		{"PUT", path, []byte("name: etag-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 4\n")},
		{"DELETE", path, nil},
	} {
		rec := withEtag(tc.method, tc.path, v1, tc.body)
		if rec.Code != 412 || !strings.Contains(rec.Body.String(), "etag-cluster") {
			t.Errorf("%s with a stale etag: %d %s, want 412 naming the compute", tc.method, rec.Code, rec.Body)
		}
	}
	// A job: cancel honours If-Match too.
	sub := call(h, token, "POST", "/v1/workspaces/default/jobs", []byte(`{"name": "etag-job", "command": "true", "compute": "etag-cluster"}`))
	if sub.Code != 201 {
		t.Fatalf("submit: %d %s", sub.Code, sub.Body)
	}
	jobEtag := call(h, token, "GET", "/v1/workspaces/default/jobs/etag-job", nil).Header().Get("ETag")
	if rec := withEtag("POST", "/v1/workspaces/default/jobs/etag-job/cancel", "\"stale\"", nil); rec.Code != 412 {
		t.Errorf("cancel with a stale etag: %d %s", rec.Code, rec.Body)
	}
	if rec := withEtag("POST", "/v1/workspaces/default/jobs/etag-job/cancel", jobEtag, nil); rec.Code != 202 {
		t.Errorf("cancel with the current etag: %d %s", rec.Code, rec.Body)
	}
	if rec := withEtag("DELETE", path, ok.Header().Get("ETag"), nil); rec.Code != 202 {
		t.Errorf("DELETE with the current etag: %d %s", rec.Code, rec.Body)
	}
}
