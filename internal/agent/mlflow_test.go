package agent

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// The agent's one MLflow endpoint serves every job's run, each by its own
// token: a job's token reaches its own run only, and is refused once the
// job ended, while a later job's works.
func TestMLflowEndpointServesEachJobByItsToken(t *testing.T) {
	a := &agent{cfg: Config{Dir: t.TempDir()}, log: slog.New(slog.DiscardHandler), jobCtx: t.Context()}
	one, oneEnv, err := startMLflow(newJob(a, assignment("one", "true")))
	if err != nil {
		t.Fatal(err)
	}
	two, twoEnv, err := startMLflow(newJob(a, assignment("two", "true")))
	if err != nil {
		t.Fatal(err)
	}
	defer two.close()
	if oneEnv["MLFLOW_TRACKING_URI"] != twoEnv["MLFLOW_TRACKING_URI"] || oneEnv["MLFLOW_TRACKING_TOKEN"] == twoEnv["MLFLOW_TRACKING_TOKEN"] {
		t.Fatalf("endpoints %v and %v; want one address, two tokens", oneEnv, twoEnv)
	}
	get := func(token, run string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, oneEnv["MLFLOW_TRACKING_URI"]+"/api/2.0/mlflow/runs/get", strings.NewReader(`{"run_id":"`+run+`"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		token, run string
		want       int
	}{
		{oneEnv["MLFLOW_TRACKING_TOKEN"], "one", 200},
		{oneEnv["MLFLOW_TRACKING_TOKEN"], "two", 404},
		{twoEnv["MLFLOW_TRACKING_TOKEN"], "two", 200},
		{"not-a-token", "one", 401},
	} {
		if code, body := get(c.token, c.run); code != c.want || (code == 200 && !strings.Contains(body, `"`+c.run+`"`)) {
			t.Errorf("run %s: %d %s, want %d", c.run, code, body, c.want)
		}
	}
	one.close()
	if code, _ := get(oneEnv["MLFLOW_TRACKING_TOKEN"], "one"); code != 401 {
		t.Errorf("the ended job's token: %d, want 401", code)
	}
	if code, _ := get(twoEnv["MLFLOW_TRACKING_TOKEN"], "two"); code != 200 {
		t.Errorf("the running job's token after another ended: %d, want 200", code)
	}
}
