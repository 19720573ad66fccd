package server_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tideml/tide/api"
)

// TestStudioServerlessJob: Studio shows a serverless job's compute as what
// the job asked for (not its hidden compute's name), on the jobs list, its
// Serverless filter, and the job's page; the job's two nodes' lines carry
// their [node-K] prefix on the all-nodes log.
func TestStudioServerlessJob(t *testing.T) {
	b := newBrowser(t)
	in, _ := newServer(t)
	base := in.cfg.AdvertiseURL
	j := submit(t, in, "command: echo serverless rank $NODE_RANK\nresources:\n  instance_count: 2\n")
	if j.Serverless == nil {
		t.Fatalf("a job without compute was not serverless: %+v", j)
	}
	if got := waitJob(t, in, j.Name, 60*time.Second); got.Status != api.JobCompleted {
		t.Fatalf("serverless job: %s %s", got.Status, got.Error)
	}
	want := "serverless: 2 × " + j.Serverless.InstanceType

	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.run("sign in", chromedp.SendKeys(chromedp.CSS("#token"), in.srv.AdminToken), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("signed in", `!document.querySelector('#token')`, 30*time.Second)
	b.run("the serverless jobs", chromedp.Navigate(base+"/#/jobs?compute=serverless"))
	b.waitJS("the job listed as serverless", `(() => { const t = document.body.innerText; return t.includes(`+strconv.Quote(j.Name)+`) && t.includes(`+strconv.Quote(want)+`); })()`, 30*time.Second)
	if txt := b.text(); strings.Contains(txt, j.Compute) {
		t.Errorf("the jobs list shows the hidden compute %s:\n%s", j.Compute, txt)
	}
	b.run("the job's page", chromedp.Navigate(base+"/#/jobs/"+j.Name))
	b.waitJS("the job's compute as serverless", `document.body.innerText.includes(`+strconv.Quote(want)+`)`, 30*time.Second)
	b.waitJS("each node's line with its prefix", `(() => { const t = document.querySelector('#log').innerText;
		return t.includes('[node-0] serverless rank 0') && t.includes('[node-1] serverless rank 1'); })()`, 30*time.Second)
}
