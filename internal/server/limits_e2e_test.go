package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/spec"
)

// TestSubmissionBurst sends submissions from many goroutines, far beyond
// the limits, to two workspaces: "default" limited by its rate (a burst
// of 10, then 20 per second) and "queue" by its queue (25 jobs, on a
// paused compute). Every answer must be 201 or a 429 that names the limit
// and the workspace and has Retry-After; every accepted job must exist
// (and run), no refused one may; /metrics must count the refusals.
//
// TIDE_BURST=N sends N submissions to each workspace instead of 1,920.
func TestSubmissionBurst(t *testing.T) {
	const goroutines = 48 // per workspace
	each := 40
	if n, err := strconv.Atoi(os.Getenv("TIDE_BURST")); err == nil && n > 0 {
		each = (n + goroutines - 1) / goroutines
	}
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) {
		c.Limits.SubmitRate, c.Limits.SubmitBurst = 20, 10
		c.Limits.Workspaces = map[string]config.Limit{"queue": {SubmitRate: 1e6, SubmitBurst: 1_000_000, MaxQueuedJobs: 25}}
	})
	t.Cleanup(func() { cleanup(t, in) })
	ctx := t.Context()
	if _, err := in.client.PutWorkspace(ctx, api.Workspace{Name: "queue"}); err != nil {
		t.Fatal(err)
	}
	paused := "name: cpu\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 0\n"
	createCompute(t, in, paused)
	c, err := spec.ParseCompute("c.yml", []byte(paused), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.client.PutCompute(ctx, "queue", c); err != nil {
		t.Fatal(err)
	}

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * goroutines}}
	type answer struct {
		ws         string
		status     int
		retryAfter string
		problem    api.Problem
		job        api.Job
	}
	answers := make(chan answer, 2*goroutines*each)
	start := time.Now()
	var wg sync.WaitGroup
	for _, ws := range []string{"default", "queue"} {
		for range goroutines {
			wg.Go(func() {
				for range each {
					req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+in.cfg.Listen+"/v1/workspaces/"+ws+"/jobs",
						strings.NewReader(`{"command": "true", "compute": "cpu"}`))
					req.Header.Set("Authorization", "Bearer "+in.srv.AdminToken)
					req.Header.Set("Content-Type", "application/json")
					resp, err := hc.Do(req)
					if err != nil {
						t.Errorf("submitting to %s: %v", ws, err)
						return
					}
					a := answer{ws: ws, status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if a.status == 201 {
						err = json.Unmarshal(b, &a.job)
					} else {
						err = json.Unmarshal(b, &a.problem)
					}
					if err != nil {
						t.Errorf("%s: answer %d: %v: %s", ws, a.status, err, b)
					}
					answers <- a
				}
			})
		}
	}
	wg.Wait()
	close(answers)

	accepted := map[string]map[string]bool{"default": {}, "queue": {}}
	refused := map[string]int{}
	wantLimit := map[string]string{"default": "limits.submit_rate", "queue": "limits.max_queued_jobs"}
	for a := range answers {
		switch a.status {
		case 201:
			accepted[a.ws][a.job.Name] = true
		case 429:
			refused[a.ws]++
			p := a.problem
			secs, err := strconv.Atoi(a.retryAfter)
			if err != nil || secs < 1 || p.RetryAfter != secs {
				t.Errorf("%s: 429 with Retry-After %q and retry_after %d", a.ws, a.retryAfter, p.RetryAfter)
			}
			if p.Code != api.CodeTooManyRequests || p.Workspace != a.ws || p.Limit != wantLimit[a.ws] ||
				!strings.Contains(p.Detail, a.ws) || !strings.Contains(p.Detail, p.Limit) || !strings.Contains(p.Detail, "retry in") {
				t.Errorf("%s: 429 problem %+v", a.ws, p)
			}
		default:
			t.Errorf("%s: answer %d %+v, want 201 or 429", a.ws, a.status, a.problem)
		}
	}
	t.Logf("%d submissions in %s: default: %d accepted, %d refused; queue: %d accepted, %d refused",
		2*goroutines*each, time.Since(start).Round(time.Millisecond), len(accepted["default"]), refused["default"], len(accepted["queue"]), refused["queue"])
	if n := len(accepted["default"]); n < 10 || refused["default"] == 0 {
		t.Errorf("default: %d accepted (want the burst of 10 at least), %d refused (want some)", n, refused["default"])
	}
	// The queue limit holds exactly (one write transaction at a time on
	// SQLite, serializable ones on PostgreSQL).
	if n := len(accepted["queue"]); n != 25 || refused["queue"] == 0 {
		t.Errorf("queue: %d accepted (want 25), %d refused (want some)", n, refused["queue"])
	}

	// Every accepted job is stored, and nothing of the refused ones.
	for ws, names := range accepted {
		js, err := in.client.Jobs(ctx, ws, api.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) != len(names) {
			t.Errorf("%s: %d jobs stored, %d accepted", ws, len(js), len(names))
		}
		for _, j := range js {
			if !names[j.Name] {
				t.Errorf("%s: job %s stored but not accepted", ws, j.Name)
			}
			if ws == "queue" && j.Status != api.JobQueued {
				t.Errorf("queue: job %s is %s on a paused compute", j.Name, j.Status)
			}
		}
	}

	// /metrics counts the refusals by workspace and limit.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+in.cfg.Listen+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+in.srv.AdminToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for ws, limit := range wantLimit {
			if sc.Text() == fmt.Sprintf(`tide_submissions_refused_total{limit=%q,workspace=%q} %d`, limit, ws, refused[ws]) {
				counted[ws] = true
			}
		}
	}
	resp.Body.Close()
	if !counted["default"] || !counted["queue"] {
		t.Errorf("/metrics: refusals counted for %v, want default (%d) and queue (%d)", counted, refused["default"], refused["queue"])
	}

	// The audit log keeps the accepted submissions, not the refusals
	// (counted above): a burst must not write an entry per 429.
	total := len(accepted["default"]) + len(accepted["queue"])
	var entries []api.AuditEntry
	waitFor(t, "the accepted submissions audited", 30*time.Second, func() bool {
		entries, err = in.client.Audit(ctx, "", "", 100000)
		n := 0
		for _, e := range entries {
			if e.Status == 201 && strings.HasSuffix(e.Path, "/jobs") {
				n++
			}
		}
		return err == nil && n >= total
	})
	for _, e := range entries {
		if e.Status == http.StatusTooManyRequests {
			t.Fatalf("a refused submission was audited: %+v", e)
		}
	}

	// The accepted jobs of default run once its compute may have a node.
	one := 1
	if _, err := in.client.PatchCompute(ctx, "default", "cpu", api.ComputePatch{MaxInstances: &one}); err != nil {
		t.Fatal(err)
	}
	// One node runs them one after another: the more the bucket let in
	// (a slow, loaded machine lets in more), the longer they take.
	waitFor(t, "the accepted jobs to complete", 60*time.Second+time.Duration(len(accepted["default"]))*500*time.Millisecond, func() bool {
		js, err := in.client.Jobs(context.Background(), "default", api.JobFilter{})
		if err != nil {
			return false
		}
		for _, j := range js {
			if j.Status != api.JobCompleted {
				if api.JobTerminal(j.Status) {
					t.Fatalf("job %s: %s %s", j.Name, j.Status, j.Error)
				}
				return false
			}
		}
		return true
	})
}
