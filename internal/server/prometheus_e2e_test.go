package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/server/servertest"
)

// TestPrometheusScrapesScaleUpAndDown runs Debian's prometheus against a
// real server: it scrapes /metrics every second (with the admin token)
// while a compute scales 0 -> 2 -> 0 around two jobs, and PromQL must see
// the two nodes, the jobs in the counters and histograms, the scale-ups and
// scale-downs, and the API and controller latencies.
func TestPrometheusScrapesScaleUpAndDown(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus not installed; .ci/run installs Debian's prometheus")
		}
		t.Skip("prometheus not installed (apt-get install prometheus)")
	}
	in, dir := newServer(t)
	token := in.srv.AdminToken
	promPort := freeport.For(t)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tide
    metrics_path: /metrics
    authorization:
      credentials: %q
    static_configs:
      - targets: [%q]
`, token, in.cfg.Listen)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prom := exec.CommandContext(ctx, bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "prom"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(promPort), "--log.level=warn")
	logFile, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	prom.Stdout, prom.Stderr = logFile, logFile
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = prom.Wait() })
	q := promQuery(fmt.Sprintf("http://127.0.0.1:%d", promPort))
	// Without a token, /metrics answers 401 (metrics_open is off).
	resp, err := http.Get("http://" + in.cfg.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("/metrics without a token: %d, want 401", resp.StatusCode)
	}
	waitFor(t, "prometheus to scrape tide", 60*time.Second, func() bool {
		v, ok := q(`up{job="tide"}`)
		return ok && v == 1
	})

	createCompute(t, in, "name: obs\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\nidle_time_before_scale_down: 3\n")
	a := submit(t, in, "command: sleep 4\ncompute: obs\n")
	b := submit(t, in, "command: sleep 4\ncompute: obs\n")
	for _, j := range []*api.Job{a, b} {
		if got := waitJob(t, in, j.Name, 90*time.Second); got.Status != api.JobCompleted {
			t.Fatalf("job %s: %s (%s)", got.Name, got.Status, got.Error)
		}
	}
	waitFor(t, "the compute to scale back to 0", 60*time.Second, func() bool {
		c, err := in.client.Compute(context.Background(), "default", "obs")
		return err == nil && c.CurrentNodeCount == 0
	})
	nodes := `sum(tide_compute_nodes{compute="obs",state=~"idle|running|preparing"})`
	waitFor(t, "prometheus to see 0 nodes again", 30*time.Second, func() bool {
		v, ok := q(nodes)
		return ok && v == 0
	})
	checks := []struct {
		query string
		want  func(float64) bool
		what  string
	}{
		{"max_over_time(" + nodes + "[5m:1s])", func(v float64) bool { return v == 2 }, "2 nodes at the peak"},
		{`sum(tide_jobs_submitted_total{compute="obs"})`, func(v float64) bool { return v == 2 }, "2 jobs submitted"},
		{`sum(tide_jobs_finished_total{compute="obs",status="Completed"})`, func(v float64) bool { return v == 2 }, "2 jobs completed"},
		{`sum(tide_job_queue_wait_seconds_count{compute="obs"})`, func(v float64) bool { return v == 2 }, "2 queue waits"},
		{`sum(tide_job_duration_seconds_bucket{compute="obs",status="Completed",le="+Inf"}) - sum(tide_job_duration_seconds_bucket{compute="obs",status="Completed",le="1"})`, func(v float64) bool { return v == 2 }, "2 runs longer than 1 s"},
		{`sum(tide_nodes_created_total{compute="obs"})`, func(v float64) bool { return v == 2 }, "2 nodes created"},
		{`sum(tide_scale_ups_total{compute="obs"})`, func(v float64) bool { return v >= 1 }, "a scale-up"},
		{`sum(tide_scale_downs_total{compute="obs"})`, func(v float64) bool { return v == 2 }, "2 nodes scaled down"},
		{`sum(tide_http_request_duration_seconds_count{route="/v1/workspaces/{workspace}/jobs",method="POST",code="201"})`, func(v float64) bool { return v == 2 }, "2 submissions timed"},
		{`sum(tide_controller_turn_seconds_count)`, func(v float64) bool { return v > 0 }, "controller turns timed"},
		{`tide_store_statements_total`, func(v float64) bool { return v > 0 }, "store statements counted"},
	}
	for _, c := range checks {
		last := "no answer" // what prometheus answered last, should it never hold
		if !servertest.Poll(context.Background(), 15*time.Second, func() bool {
			v, ok := q(c.query)
			if ok {
				last = fmt.Sprint(v)
			}
			return ok && c.want(v)
		}) {
			// What the compute went through, to tell a metric counted
			// wrongly from a run that did something else (this failed
			// once under load, cause unknown).
			var history strings.Builder
			evs, _ := in.client.ComputeEvents(context.Background(), "default", "obs")
			for _, e := range evs {
				fmt.Fprintf(&history, "\n  %s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Message)
			}
			t.Fatalf("prometheus never saw %s (%s) in 15s; it last answered %s; the compute's events:%s", c.what, c.query, last, history.String())
		}
	}
	// Every query of the shipped Grafana dashboard is valid PromQL over
	// tide's metric names (a series that never happened, like preemptions
	// here, has no data, which is not an error).
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "tide-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$compute", "obs")
			if err := promValid(q, expr); err != nil {
				t.Errorf("dashboard panel %q: %v", p.Title, err)
			}
		}
	}
}

// promQuery returns a function that runs an instant PromQL query and gives
// the first sample's value.
func promQuery(base string) func(string) (float64, bool) {
	return func(query string) (float64, bool) {
		resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		var out struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&out) != nil || out.Status != "success" || len(out.Data.Result) == 0 {
			return 0, false
		}
		s, _ := out.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		return v, err == nil
	}
}

// promValid checks that Prometheus accepts expr.
func promValid(q func(string) (float64, bool), expr string) error {
	if _, ok := q("count(" + expr + ") or vector(0)"); !ok {
		return fmt.Errorf("query %s: not valid PromQL", expr)
	}
	return nil
}
