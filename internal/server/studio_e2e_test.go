package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/tidetest"
)

// TestStudio drives Studio in a real headless Chromium against a real
// server with local nodes: sign in (a wrong token first), create a compute
// from the form (a validation error first), watch a job's node in the nodes
// tab and its log lines arrive live, see the monitoring chart's 0 -> 1 -> 0,
// survive a forged cross-site POST (403), cancel a job from its page, and
// find no token in any page.
func TestStudio(t *testing.T) {
	b := newBrowser(t)
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) { c.SampleInterval = 200 * time.Millisecond })
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()
	base := in.cfg.AdvertiseURL
	token := in.srv.AdminToken
	var pages []string // every page's HTML, checked for secrets at the end
	keep := func() { pages = append(pages, eval[string](b, `document.documentElement.outerHTML`)) }

	// Sign in: a wrong token says why, the right one opens the computes.
	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.shot("signin")
	b.run("a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "tide_000wrong"), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("the reason the token is refused", `document.querySelector('.form-errors').textContent.includes('not valid on this server')`, 30*time.Second)
	b.set("#token", "")
	b.run("the admin token", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("the empty computes list", `document.body.innerText.includes('No computes yet')`, 30*time.Second)
	cookie := eval[string](b, `document.cookie`)
	if strings.Contains(cookie, token) {
		t.Errorf("the page's scripts can read the token from document.cookie: %q", cookie)
	}
	keep()

	// Create a compute from the form: max below min is refused with the
	// server's message on the field, then a good one opens its page.
	b.run("the create form", chromedp.Click(chromedp.CSS("#create-compute")), chromedp.WaitVisible(chromedp.CSS("#create-form")))
	b.set("#c-min", "3")
	b.set("#c-max", "1")
	b.set("#c-idle", "1")
	b.run("a bad compute", chromedp.SendKeys(chromedp.CSS("#c-name"), "studio"), chromedp.Click(chromedp.CSS("#create-form button[type=submit]")))
	b.waitJS("max_instances highlighted with the server's message", `document.querySelector('#c-max.invalid') && document.querySelector('#create-form').innerText.includes('must be >= min_instances')`, 30*time.Second)
	b.shot("create-compute-error")
	keep()
	b.set("#c-min", "0")
	b.run("a good compute", chromedp.Click(chromedp.CSS("#create-form button[type=submit]")))
	b.waitJS("the compute's page", `location.hash === '#/computes/studio' && document.querySelector('h1') && document.querySelector('h1').innerText.includes('studio')`, 30*time.Second)
	if c, err := in.client.Compute(ctx, "default", "studio"); err != nil || c.MaxInstances != 1 || c.IdleTimeBeforeScaleDown != 1 {
		t.Fatalf("the compute the form created: %+v, %v", c, err)
	}
	keep()

	// A job submitted through the API (as the CLI does): its node shows in
	// the nodes tab, and its lines arrive on its page while it runs.
	// The job waits for a file the test writes once the first line showed,
	// so the second line can only arrive live.
	gate := filepath.Join(tidetest.SharedDir(t), "go-on")
	j := submit(t, in, fmt.Sprintf("command: echo studio-line-1; while [ ! -e %s ]; do sleep 0.1; done; echo studio-line-2\ncompute: studio\n", gate))
	b.run("the nodes tab", chromedp.Navigate(base+"/#/computes/studio/nodes"))
	b.waitJS("the job's node in the nodes tab", fmt.Sprintf(`[...document.querySelectorAll('#tab-nodes a')].some(a => a.textContent === %q)`, j.Name), 60*time.Second)
	b.shot("compute-nodes")
	keep()
	b.run("the job's page", chromedp.Navigate(base+"/#/jobs/"+j.Name))
	b.waitJS("the first log line", `document.querySelector('#log') && document.querySelector('#log').innerText.includes('studio-line-1')`, 60*time.Second)
	b.waitJS("the job running", `document.querySelector('#job-status').innerText.includes('Running')`, 30*time.Second)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the second log line, live", `document.querySelector('#log').innerText.includes('studio-line-2')`, 60*time.Second)
	b.waitJS("the job completed", `document.querySelector('#job-status').innerText.includes('Completed')`, 60*time.Second)
	b.shot("job")
	keep()
	b.run("re-submit", chromedp.Click(chromedp.CSS("#resubmit")))
	b.waitJS("the re-submitted job's page", fmt.Sprintf(`location.hash.startsWith('#/jobs/') && location.hash !== '#/jobs/%s'`, j.Name), 30*time.Second)
	b.waitJS("the re-submitted job's log", `document.querySelector('#log') && document.querySelector('#log').innerText.includes('studio-line-2')`, 60*time.Second)

	// The monitoring chart shows the node going 0 -> 1 -> 0.
	b.run("the monitoring tab", chromedp.Navigate(base+"/#/computes/studio/monitoring"))
	b.waitJS("the chart of 0 -> 1 -> 0 nodes", `(() => { const c = document.querySelector('#chart');
		return c && c.querySelector('canvas') && Number(c.dataset.peak) >= 1 && c.dataset.last === '0'; })()`, 90*time.Second)
	b.shot("compute-monitoring")
	keep()

	// A page on another origin posts a form to the cancel route: the
	// browser sends the cookie (same site), and the server refuses it.
	long := submit(t, in, "command: sleep 300\ncompute: studio\n")
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id=f method=POST action="%s/v1/workspaces/default/jobs/%s/cancel"></form><script>document.getElementById('f').submit()</script>`, base, long.Name)
	}))
	defer evil.Close()
	b.run("the forged cross-site POST", chromedp.Navigate(evil.URL))
	b.waitJS("the server's 403", `location.href.includes('/cancel') && document.body.innerText.includes('X-Tide-CSRF')`, 30*time.Second)
	if got, err := in.client.Job(ctx, "default", long.Name); err != nil || got.Status == api.JobCanceled || got.Status == api.JobCancelRequested {
		t.Fatalf("a forged POST canceled the job: %+v, %v", got, err)
	}

	// Cancel from the job's page.
	b.run("the long job's page", chromedp.Navigate(base+"/#/jobs/"+long.Name))
	b.waitJS("the cancel button", `document.querySelector('#cancel') && !document.querySelector('#cancel').hidden`, 30*time.Second)
	b.run("cancel", chromedp.Click(chromedp.CSS("#cancel")))
	b.waitJS("the job canceled", `/Cancel/.test(document.querySelector('#job-status').innerText)`, 30*time.Second)
	waitFor(t, "the job canceled on the server", 60*time.Second, func() bool {
		got, err := in.client.Job(ctx, "default", long.Name)
		return err == nil && got.Status == api.JobCanceled
	})
	keep()

	// A job with 20,000 lines: every line counted, only the last 2,000 in
	// the page.
	many := submit(t, in, "command: seq 1 20000\ncompute: studio\n")
	b.run("the long log's page", chromedp.Navigate(base+"/#/jobs/"+many.Name))
	b.waitJS("all 20,000 lines counted", `document.querySelector('#log-info') && document.querySelector('#log-info').innerText.includes('of 20000 lines')`, 90*time.Second)
	if n := eval[int](b, `document.querySelector('#log').childElementCount`); n != 2000 {
		t.Errorf("the log view holds %d lines in the page, want the last 2000", n)
	}
	if last := eval[string](b, `document.querySelector('#log').lastElementChild.innerText`); last != "20000" {
		t.Errorf("the log view's last line is %q, want 20000", last)
	}

	// The jobs list, cost and usage pages render.
	for _, p := range []struct{ hash, want string }{{"jobs", j.Name}, {"cost", "Total"}, {"usage", "standardDSv2Family"}} {
		b.run("the "+p.hash+" page", chromedp.Navigate(base+"/#/"+p.hash))
		b.waitJS("the "+p.hash+" page", fmt.Sprintf(`document.querySelector('main').innerText.includes(%q)`, p.want), 30*time.Second)
		b.shot(p.hash)
		keep()
	}

	// No page holds a token: not the admin's, not a node's.
	nodeToken := regexp.MustCompile(`node\.[^."' ]+\.[0-9a-f]{64}`)
	for i, html := range pages {
		if strings.Contains(html, token) || nodeToken.MatchString(html) {
			t.Errorf("page %d holds a token:\n%s", i, html)
		}
	}

	// A compute deleted while its page is open: the page says so.
	b.run("the compute's page", chromedp.Navigate(base+"/#/computes/studio/details"))
	b.waitJS("the compute's details", `document.querySelector('dl.kv') !== null`, 30*time.Second)
	if err := in.client.DeleteCompute(ctx, "default", "studio"); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the page saying the compute was deleted", `document.body.innerText.includes('does not exist (it was deleted)')`, 60*time.Second)

	// Signing out forgets the token: the API refuses the browser.
	b.run("sign out", chromedp.Navigate(base+"/#/computes"), chromedp.WaitVisible(chromedp.CSS("#signout")), chromedp.Click(chromedp.CSS("#signout")))
	b.waitJS("the sign-in form", `document.querySelector('#token') !== null`, 30*time.Second)
	status := eval[int](b, `fetch('/v1/workspaces/default/computes').then(r => r.status)`, chromedp.EvalAwaitPromise)
	if status != 401 {
		t.Errorf("the API answered %d after sign-out, want 401", status)
	}
}

// TestStudioSignInRules: sign-in from another origin is refused, a cookie
// without the CSRF header cannot change anything, and the page carries
// headers that keep other sites from framing it.
func TestStudioSignInRules(t *testing.T) {
	in := startWith(t, t.TempDir(), "", "", nil)
	t.Cleanup(func() { cleanup(t, in) })
	base := in.cfg.AdvertiseURL
	token := in.srv.AdminToken
	post := func(path, origin, csrf, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if csrf != "" {
			req.Header.Set("X-Tide-CSRF", csrf)
		}
		req.AddCookie(&http.Cookie{Name: "tide_session", Value: token})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	form := url.Values{"token": {token}}.Encode()
	if r := post("/studio/signin", "http://evil.example", "", form); r.StatusCode != 403 {
		t.Errorf("sign-in from another origin: %d, want 403", r.StatusCode)
	}
	r := post("/studio/signin", base, "", form)
	if r.StatusCode != 200 {
		t.Fatalf("sign-in from Studio's origin: %d", r.StatusCode)
	}
	c := r.Cookies()
	if len(c) != 1 || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode || c[0].Value != token {
		t.Errorf("session cookie: %+v, want HttpOnly SameSite=Strict", c)
	}
	if r := post("/studio/signin", base, "", url.Values{"token": {"node.x." + strings.Repeat("0", 64)}}.Encode()); r.StatusCode != 401 {
		t.Errorf("sign-in with a forged node token: %d, want 401", r.StatusCode)
	}
	if r := post("/v1/workspaces/default/jobs", base, "", "command: echo x\ncompute: nope\n"); r.StatusCode != 403 {
		t.Errorf("a cookie POST without the CSRF header: %d, want 403", r.StatusCode)
	}
	if r := post("/v1/workspaces/default/jobs", base, "wrong", "command: echo x\ncompute: nope\n"); r.StatusCode != 403 {
		t.Errorf("a cookie POST with a wrong CSRF header: %d, want 403", r.StatusCode)
	}
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("GET /: %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
}
