package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TestStudioRoles drives Studio in headless Chromium as two users: a
// Reader sees no create, cancel, re-submit or delete button; a Data
// Scientist sees Cancel on the job they submitted (and it cancels it) but
// not on the admin's job, and no Create compute.
func TestStudioRoles(t *testing.T) {
	b := newBrowser(t)
	in, _ := newServer(t)
	ctx := context.Background()
	base := in.cfg.AdvertiseURL
	admin := in.client
	tokens := map[string]string{}
	clients := map[string]*api.Client{}
	for name, role := range map[string]string{"rita": api.RoleReader, "dana": api.RoleDataScientist} {
		nu, err := admin.CreateUser(ctx, api.User{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = nu.Token.Secret
		if clients[name], err = api.NewClient(base, nu.Token.Secret, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.AssignRole(ctx, "default", name, role); err != nil {
			t.Fatal(err)
		}
	}
	createCompute(t, in, "name: roles\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\n")
	jobOf := func(cl *api.Client) *api.Job {
		j, err := spec.ParseJob("job.yml", []byte("command: sleep 600\ncompute: roles\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := cl.CreateJob(ctx, "default", j)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	danas, admins := jobOf(clients["dana"]), jobOf(admin)

	signIn := func(who string) {
		b.run("sign-in page", chromedp.Navigate(base+"/"))
		b.waitJS("the sign-in form or the signed-in page", `document.querySelector('#token') || document.querySelector('#nav a.active')`, 30*time.Second)
		if eval[bool](b, `!document.querySelector('#token') || document.querySelector('#token').offsetParent === null`) {
			b.run("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
		}
		b.run("sign in as "+who, chromedp.SendKeys(chromedp.CSS("#token"), tokens[who]), chromedp.Click(chromedp.CSS("form.signin button")))
		b.waitJS("the computes list", `document.body.innerText.includes('roles')`, 30*time.Second)
	}
	// jobPage opens a job's page and says whether Cancel and Re-submit show.
	jobPage := func(name string) (cancel, resubmit bool) {
		b.run("job "+name, chromedp.Navigate(base+"/#/jobs/"+name))
		b.waitJS("the job's heading", `document.querySelector('#job-status') && document.querySelector('#job-status').innerText.length > 0`, 30*time.Second)
		return eval[bool](b, `!document.querySelector('#cancel').hidden`), eval[bool](b, `!document.querySelector('#resubmit').hidden`)
	}

	signIn("rita")
	if eval[bool](b, `!!document.querySelector('#create-compute')`) {
		t.Error("a Reader sees Create compute")
	}
	b.run("the compute's page", chromedp.Navigate(base+"/#/computes/roles"))
	b.waitJS("the compute's heading", `document.querySelector('h1') && document.querySelector('h1').innerText.includes('roles')`, 30*time.Second)
	if n := eval[int](b, `document.querySelectorAll('.actions button').length`); n != 0 {
		t.Errorf("a Reader sees %d action buttons on a compute's page", n)
	}
	for _, j := range []string{danas.Name, admins.Name} {
		if c, r := jobPage(j); c || r {
			t.Errorf("a Reader on job %s sees cancel=%v re-submit=%v", j, c, r)
		}
	}

	signIn("dana")
	if eval[bool](b, `!!document.querySelector('#create-compute')`) {
		t.Error("a Data Scientist sees Create compute")
	}
	if c, r := jobPage(admins.Name); c || !r {
		t.Errorf("a Data Scientist on the admin's job sees cancel=%v re-submit=%v; want no cancel, re-submit", c, r)
	}
	if c, _ := jobPage(danas.Name); !c {
		t.Fatal("a Data Scientist does not see Cancel on her own job")
	}
	b.run("cancel her job", chromedp.Click(chromedp.CSS("#cancel")))
	waitFor(t, "dana's job canceled", 60*time.Second, func() bool {
		j, err := admin.Job(ctx, "default", danas.Name)
		return err == nil && (j.Status == api.JobCanceled || j.Status == api.JobCancelRequested)
	})
	if _, err := admin.CancelJob(ctx, "default", admins.Name); err != nil {
		t.Fatal(err)
	}
}
