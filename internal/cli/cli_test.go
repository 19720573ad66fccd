package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

func TestExitCode(t *testing.T) {
	problem := func(status int, code string) error {
		return fmt.Errorf("wrapped: %w", &api.Error{StatusCode: status, Problem: api.Problem{Status: status, Code: code, Detail: "x"}})
	}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"usage", usagef("bad"), ExitUsage},
		{"local validation", spec.Errors{{File: "c.yml", Line: 3, Field: "max_instances", Message: "must be >= 1"}}, ExitUsage},
		{"one field error", &spec.FieldError{Field: "name", Message: "required"}, ExitUsage},
		{"not found", problem(404, api.CodeNotFound), ExitNotFound},
		{"not found without code", problem(404, ""), ExitNotFound},
		{"server validation", problem(400, api.CodeValidation), ExitUsage},
		{"not supported", problem(400, api.CodeNotSupported), ExitUsage},
		{"bad request without code", problem(422, ""), ExitUsage},
		{"quota", problem(409, api.CodeQuotaExceeded), ExitError},
		{"conflict", problem(409, api.CodeConflict), ExitError},
		{"unauthorized", problem(401, api.CodeUnauthorized), ExitError},
		{"internal", problem(500, api.CodeInternal), ExitError},
		{"network", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, ExitError},
		{"job failed", &JobOutcomeError{Job: "j", Status: api.JobFailed}, ExitError},
		{"job canceled", &JobOutcomeError{Job: "j", Status: api.JobCanceled}, ExitError},
		{"interrupted", fmt.Errorf("streaming: %w", context.Canceled), ExitInterrupted},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

// runCLI runs the CLI in-process with no server behind it (only commands
// that fail before contacting one are tested here; cmd/tide's scripts run
// the rest against a real server).
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	app := &App{
		Stdin:  strings.NewReader(""),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
		Now:    func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) },
	}
	code = app.Run(context.Background(), args)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"TIDE_CONFIG": dir + "/none.json", "TIDE_SERVER": "http://127.0.0.1:1"}
	tests := []struct {
		args       []string
		want       int
		wantStderr string
	}{
		{[]string{"bogus"}, ExitUsage, `unknown command "bogus"`},
		{[]string{"compute", "bogus"}, ExitUsage, `unknown command "bogus" for "tide compute"`},
		{[]string{"compute", "show"}, ExitUsage, "want 1 argument(s) (NAME), got 0"},
		{[]string{"compute", "list", "--nope"}, ExitUsage, "unknown flag: --nope"},
		{[]string{"compute", "list", "-o", "xml"}, ExitUsage, `--output "xml": want table, json or yaml`},
		{[]string{"compute", "create"}, ExitUsage, "name a compute file with -f, or give at least --name and --type"},
		{[]string{"compute", "create", "-f", dir + "/missing.yml"}, ExitUsage, "missing.yml"},
		{[]string{"compute", "update", "cpu"}, ExitUsage, "nothing to update"},
		{[]string{"compute", "delete", "cpu"}, ExitUsage, "standard input is not a terminal; pass --yes"},
		{[]string{"job", "download", "j", "--all", "--output-name", "x"}, ExitUsage, "pass one or the other"},
		{[]string{"compute", "list-sizes"}, ExitError, "cannot reach the tide server"},
		{[]string{"version"}, ExitOK, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, env, tt.args...)
			if code != tt.want {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.want, stderr)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestValidationErrorNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/cluster.yml"
	writeFile(t, file, "name: cpu-cluster\ntype: amlcompute\nmax_instance: 2\n")
	code, _, stderr := runCLI(t, map[string]string{"TIDE_CONFIG": dir + "/none.json"}, "compute", "create", "-f", file)
	if code != ExitUsage {
		t.Errorf("exit code = %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(stderr, "cluster.yml:3") || !strings.Contains(stderr, "max_instance") {
		t.Errorf("stderr = %q, want the file, line 3 and the field", stderr)
	}
}

func TestVersionJSON(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, "version", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"version": "(devel)"`) && !strings.Contains(stdout, `"version": "`) {
		t.Errorf("code %d, stdout %s", code, stdout)
	}
}

// TestStreamExitCodes runs `tide job stream` against an HTTP handler that
// replays a finished job's SSE log (the real server is exercised by the
// scripts in cmd/tide; this pins the exit code per outcome).
func TestStreamExitCodes(t *testing.T) {
	tests := []struct {
		status   string
		want     int
		wantErr  string
		wantLogs string
	}{
		{api.JobCompleted, ExitOK, "Job j1 completed in 2s.", "step 1\nstep 2\n"},
		{api.JobFailed, ExitError, "Job j1 failed after 2s: exit code 3.", "step 1\nstep 2\n"},
		{api.JobCanceled, ExitError, "Job j1 canceled after 2s.", "step 1\nstep 2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/workspaces/default/jobs/j1" {
					// The stream asks for the job first (how many nodes).
					fmt.Fprint(w, `{"name":"j1","status":"Running"}`)
					return
				}
				if r.URL.Path != "/v1/workspaces/default/jobs/j1/logs" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				start := now.Add(-time.Minute)
				code := 0
				if tt.status == api.JobFailed {
					code = 3
				}
				j, _ := json.Marshal(api.Job{Name: "j1", Status: tt.status, StartTime: start, EndTime: start.Add(2 * time.Second), ExitCode: &code})
				fmt.Fprint(w, "event: status\ndata: {\"name\":\"j1\",\"status\":\"Running\"}\n\n")
				fmt.Fprint(w, "event: log\nid: 1\ndata: {\"seq\":1,\"text\":\"step 1\"}\n\n")
				fmt.Fprint(w, "event: log\nid: 2\ndata: {\"seq\":2,\"text\":\"step 2\"}\n\n")
				fmt.Fprintf(w, "event: status\ndata: %s\n\nevent: end\ndata: %s\n\n", j, j)
			}))
			defer srv.Close()
			code, stdout, stderr := runCLI(t, map[string]string{"TIDE_SERVER": srv.URL, "TIDE_CONFIG": t.TempDir() + "/c.json"}, "job", "stream", "j1")
			if code != tt.want {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.want, stderr)
			}
			if stdout != tt.wantLogs {
				t.Errorf("stdout = %q, want %q", stdout, tt.wantLogs)
			}
			if !strings.Contains(stderr, "Status: Running\n") || !strings.HasSuffix(stderr, tt.wantErr+"\n") {
				t.Errorf("stderr = %q, want the status and to end with %q", stderr, tt.wantErr)
			}
		})
	}
}
