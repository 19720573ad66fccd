package api_test

// These tests run the client against small httptest handlers that speak the
// server's wire format, because the client must be tested without importing
// internal/server (which imports this package). The end-to-end tests in
// cmd/tide run the client against the real server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

func newClient(t *testing.T, h http.Handler) *api.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := api.NewClient(srv.URL, "secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewClient(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "http://127.0.0.1:7430", want: "http://127.0.0.1:7430"},
		{in: "http://127.0.0.1:7430/", want: "http://127.0.0.1:7430"},
		{in: "127.0.0.1:7430", want: "http://127.0.0.1:7430"},
		{in: "https://tide.example.com/base/", want: "https://tide.example.com/base"},
		{in: "", err: "no server URL"},
		{in: "ftp://x", err: "want a URL"},
	}
	for _, tt := range tests {
		c, err := api.NewClient(tt.in, "", nil)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("NewClient(%q) error = %v, want it to contain %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("NewClient(%q): %v", tt.in, err)
		}
		if got := c.Server(); got != tt.want {
			t.Errorf("NewClient(%q).Server() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		ctype, body string
		wantMsg     string
		wantCode    string
		notFound    bool
	}{
		{
			name: "problem", status: 404, ctype: "application/problem+json",
			body:    `{"title":"Not Found","status":404,"code":"NotFound","detail":"compute cpu-cluster: not found"}`,
			wantMsg: "compute cpu-cluster: not found", wantCode: api.CodeNotFound, notFound: true,
		},
		{
			name: "quota", status: 409, ctype: "application/problem+json",
			body:    `{"title":"Quota exceeded","status":409,"code":"QuotaExceeded","detail":"quota exceeded for standardDSv2Family"}`,
			wantMsg: "quota exceeded for standardDSv2Family", wantCode: api.CodeQuotaExceeded,
		},
		{
			name: "plain text 404", status: 404, ctype: "text/plain", body: "404 page not found\n",
			wantMsg: "404 page not found", wantCode: api.CodeNotFound, notFound: true,
		},
		{
			name: "empty 500", status: 500, ctype: "", body: "",
			wantMsg: "HTTP 500 Internal Server Error",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.ctype != "" {
					w.Header().Set("Content-Type", tt.ctype)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			_, err := c.Compute(context.Background(), "default", "cpu-cluster")
			var e *api.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *api.Error", err, err)
			}
			if e.StatusCode != tt.status || err.Error() != tt.wantMsg || api.ProblemCode(err) != tt.wantCode {
				t.Errorf("got status %d, message %q, code %q; want %d, %q, %q",
					e.StatusCode, err.Error(), api.ProblemCode(err), tt.status, tt.wantMsg, tt.wantCode)
			}
			if got := api.IsNotFound(fmt.Errorf("wrapped: %w", err)); got != tt.notFound {
				t.Errorf("IsNotFound = %v, want %v", got, tt.notFound)
			}
		})
	}
}

func TestRequests(t *testing.T) {
	type seen struct{ method, path, query, auth, body string }
	var (
		mu   sync.Mutex
		last seen
	)
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		last = seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), string(b)}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/computes/new"):
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"name":"new","provisioning_state":"Creating"}`)
		case r.Method == http.MethodPut:
			io.WriteString(w, `{"name":"old","provisioning_state":"Succeeded"}`)
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusAccepted)
		default:
			io.WriteString(w, `{"value":[]}`)
		}
	}))
	ctx := context.Background()
	three := 3
	tests := []struct {
		name string
		call func() error
		want seen
	}{
		{"create compute", func() error {
			out, created, err := c.PutCompute(ctx, "default", &api.Compute{Name: "new", Type: "amlcompute"})
			if err == nil && (!created || out.ProvisioningState != "Creating") {
				err = fmt.Errorf("created = %v, state %q", created, out.ProvisioningState)
			}
			return err
		}, seen{method: "PUT", path: "/v1/workspaces/default/computes/new"}},
		{"update compute", func() error {
			_, created, err := c.PutCompute(ctx, "default", &api.Compute{Name: "old"})
			if err == nil && created {
				err = errors.New("created = true on 200")
			}
			return err
		}, seen{method: "PUT", path: "/v1/workspaces/default/computes/old"}},
		{"patch", func() error {
			_, err := c.PatchCompute(ctx, "ws 1", "cpu", api.ComputePatch{MaxInstances: &three})
			return err
		}, seen{method: "PATCH", path: "/v1/workspaces/ws%201/computes/cpu", body: `{"max_instances":3}`}},
		{"delete", func() error { return c.DeleteCompute(ctx, "default", "cpu") },
			seen{method: "DELETE", path: "/v1/workspaces/default/computes/cpu"}},
		{"jobs filter", func() error {
			_, err := c.Jobs(ctx, "default", api.JobFilter{Compute: "cpu", Status: "Running"})
			return err
		}, seen{method: "GET", path: "/v1/workspaces/default/jobs", query: "compute=cpu&status=Running"}},
		{"usages", func() error { _, err := c.Usages(ctx, "westus"); return err },
			seen{method: "GET", path: "/v1/usages", query: "location=westus"}},
		{"logs after", func() error { _, err := c.Logs(ctx, "default", "j1", 7); return err },
			seen{method: "GET", path: "/v1/workspaces/default/jobs/j1/logs", query: "after=7"}},
		{"artifact path", func() error {
			body, _, err := c.OpenArtifact(ctx, "default", "j1", "outputs/a b/model.pt")
			if err == nil {
				body.Close()
			}
			return err
		}, seen{method: "GET", path: "/v1/workspaces/default/jobs/j1/artifacts/outputs/a%20b/model.pt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := last
			mu.Unlock()
			if got.auth != "Bearer secret" {
				t.Errorf("Authorization = %q", got.auth)
			}
			if got.method != tt.want.method || got.path != tt.want.path || got.query != tt.want.query {
				t.Errorf("request = %s %s?%s, want %s %s?%s", got.method, got.path, got.query, tt.want.method, tt.want.path, tt.want.query)
			}
			if tt.want.body != "" && got.body != tt.want.body {
				t.Errorf("body = %s, want %s", got.body, tt.want.body)
			}
		})
	}
}

func TestEventReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []api.ServerEvent
	}{
		{
			name: "events, comments and sticky ids",
			in: ": keep-alive\n\n" +
				"event: log\nid: 1\ndata: {\"seq\":1}\n\n" +
				"event: status\ndata: {\"status\":\"Running\"}\n\n" +
				"data: a\ndata: b\n\n" +
				"event: end\ndata:\n\n",
			want: []api.ServerEvent{
				{ID: "1", Type: "log", Data: []byte(`{"seq":1}`)},
				{ID: "1", Type: "status", Data: []byte(`{"status":"Running"}`)},
				{ID: "1", Type: "message", Data: []byte("a\nb")},
				{ID: "1", Type: "end", Data: []byte("")},
			},
		},
		{
			name: "an event cut off by the end is dropped",
			in:   "event: log\nid: 2\ndata: {}\n\nevent: log\ndata: {\"seq\":3}",
			want: []api.ServerEvent{{ID: "2", Type: "log", Data: []byte("{}")}},
		},
		{
			name: "crlf-free colon handling",
			in:   "data:no-space\nevent:x\n\n",
			want: []api.ServerEvent{{Type: "x", Data: []byte("no-space")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := api.NewEventReader(strings.NewReader(tt.in))
			var got []api.ServerEvent
			for {
				ev, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ev)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// logServer serves a job log of n lines over SSE. The first connection is
// cut after dropAfter lines, so the client must resume with Last-Event-ID.
type logServer struct {
	n, dropAfter int
	mu           sync.Mutex
	lastIDs      []string
}

func (s *logServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Accept") != "text/event-stream" {
		http.Error(w, "want SSE", http.StatusNotAcceptable)
		return
	}
	s.mu.Lock()
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	first := len(s.lastIDs) == 1
	s.mu.Unlock()
	after, _ := strconv.Atoi(r.Header.Get("Last-Event-ID"))
	w.Header().Set("Content-Type", "text/event-stream")
	if first {
		fmt.Fprintf(w, "event: status\ndata: {\"name\":\"j1\",\"status\":\"Running\"}\n\n")
	}
	for i := after + 1; i <= s.n; i++ {
		if first && i > s.dropAfter {
			return // the connection drops without an "end" event
		}
		fmt.Fprintf(w, "event: log\nid: %d\ndata: {\"seq\":%d,\"text\":\"line %d\"}\n\n", i, i, i)
		// A line resent on the new connection must not reach the caller twice.
		if !first && i == after+1 && after > 0 {
			fmt.Fprintf(w, "event: log\nid: %d\ndata: {\"seq\":%d,\"text\":\"dup\"}\n\n", after, after)
		}
	}
	fmt.Fprintf(w, "event: status\ndata: {\"name\":\"j1\",\"status\":\"Completed\"}\n\n")
	fmt.Fprintf(w, "event: end\ndata: {\"name\":\"j1\",\"status\":\"Completed\"}\n\n")
}

func TestStreamLogsResumes(t *testing.T) {
	ls := &logServer{n: 5, dropAfter: 2}
	c := newClient(t, ls)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	reconnects := 0
	err := c.StreamLogs(ctx, "default", "j1", api.StreamOptions{
		OnReconnect: func(error, int) { reconnects++ },
		MaxBackoff:  10 * time.Millisecond,
	}, func(ev api.LogEvent) error {
		switch ev.Type {
		case api.LogEventLine:
			got = append(got, ev.Line.Text)
		default:
			got = append(got, ev.Type+":"+ev.Job.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "status:Running,line 1,line 2,line 3,line 4,line 5,status:Completed,end:Completed"
	if strings.Join(got, ",") != want {
		t.Errorf("events = %s\nwant %s", strings.Join(got, ","), want)
	}
	if reconnects != 1 || fmt.Sprint(ls.lastIDs) != "[ 2]" {
		t.Errorf("reconnects = %d, Last-Event-IDs = %q; want 1 and [\"\" \"2\"]", reconnects, ls.lastIDs)
	}
}

func TestStreamLogsStopsOnClientErrors(t *testing.T) {
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"title":"Not Found","status":404,"code":"NotFound","detail":"job nope: not found"}`)
	}))
	err := c.StreamLogs(context.Background(), "default", "nope", api.StreamOptions{}, func(api.LogEvent) error { return nil })
	if !api.IsNotFound(err) {
		t.Fatalf("err = %v, want not found", err)
	}
}

func TestStreamLogsCallbackError(t *testing.T) {
	c := newClient(t, &logServer{n: 3, dropAfter: 3})
	stop := errors.New("stop")
	err := c.StreamLogs(context.Background(), "default", "j1", api.StreamOptions{}, func(api.LogEvent) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the callback's error", err)
	}
}

// TestCreateJobRetriesThrottled checks that a submission refused with 429
// is sent again after Retry-After, telling OnThrottle, and that the
// refusal is returned after SubmitAttempts.
func TestCreateJobRetriesThrottled(t *testing.T) {
	var mu sync.Mutex
	refuse := 2
	posts := 0
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
		if refuse != 0 {
			refuse--
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(429)
			fmt.Fprint(w, `{"status": 429, "code": "TooManyRequests", "title": "Too Many Requests", "detail": "workspace ws submits too fast", "limit": "limits.submit_rate", "workspace": "ws"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprint(w, `{"name": "j1", "status": "Queued"}`)
	}))
	var told []string
	c.OnThrottle = func(e *api.Error, wait time.Duration, attempt int) {
		told = append(told, fmt.Sprintf("%d %s %s %v", attempt, e.Problem.Limit, e.Problem.Workspace, wait))
	}
	j, err := c.CreateJob(t.Context(), "ws", &api.Job{Command: "true", Compute: "cpu"})
	if err != nil || j.Name != "j1" {
		t.Fatalf("CreateJob = %+v, %v", j, err)
	}
	want := []string{"1 limits.submit_rate ws 100ms", "2 limits.submit_rate ws 100ms"}
	if fmt.Sprint(told) != fmt.Sprint(want) || posts != 3 {
		t.Errorf("told %q after %d posts, want %q after 3", told, posts, want)
	}

	// Refused every time: the last refusal after SubmitAttempts posts.
	refuse, posts, told = -1, 0, nil
	_, err = c.CreateJob(t.Context(), "ws", &api.Job{Command: "true", Compute: "cpu"})
	var e *api.Error
	if !errors.As(err, &e) || e.StatusCode != 429 || posts != api.SubmitAttempts || len(told) != api.SubmitAttempts-1 {
		t.Errorf("always refused: %v after %d posts, told %d times", err, posts, len(told))
	}

	// A wait past the context's deadline or MaxThrottleWait is not
	// waited for.
	for _, tt := range []struct {
		retryAfter    string
		want, timeout time.Duration
	}{{"30", 30 * time.Second, 10 * time.Second}, {"3600", time.Hour, 2 * time.Hour}} {
		posts = 0
		c2 := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			posts++
			w.Header().Set("Retry-After", tt.retryAfter)
			w.WriteHeader(429)
		}))
		ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
		_, err := c2.CreateJob(ctx, "ws", &api.Job{})
		cancel()
		if !errors.As(err, &e) || e.RetryAfter != tt.want || posts != 1 {
			t.Errorf("Retry-After %s with a %s deadline: %v (retry after %v) after %d posts", tt.retryAfter, tt.timeout, err, e.RetryAfter, posts)
		}
	}
}
