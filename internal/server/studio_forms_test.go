package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestStudioCreateForms: the create form's fields make a compute instance
// with an SSH key, idle shutdown and a daily stop schedule (a bad cron is
// refused on its field first), and a cluster with an SSH key logged in to
// as azureuser by default.
func TestStudioCreateForms(t *testing.T) {
	b := newBrowser(t)
	in, _ := newServer(t)
	ctx := context.Background()
	base := in.cfg.AdvertiseURL
	_, pub := writeKeyPair(t, t.TempDir(), "id_ed25519")

	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.run("sign in", chromedp.SendKeys(chromedp.CSS("#token"), in.srv.AdminToken), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("signed in", `!document.querySelector('#token')`, 30*time.Second)

	// An instance: its own fields show once the type is chosen.
	b.run("the create form", chromedp.Navigate(base+"/#/create"), chromedp.WaitVisible(chromedp.CSS("#create-form")))
	b.set("#c-type", "computeinstance")
	eval[bool](b, `document.querySelector('#c-type').dispatchEvent(new Event('change')) || true`)
	b.waitJS("the instance fields", `!document.querySelector('#instance-fields').hidden && document.querySelector('#cluster-fields').hidden`, 10*time.Second)
	b.set("#c-name", "form-instance")
	b.set("#c-idle-shutdown", "30")
	b.set("#c-stop-cron", "0 18 * * 9")
	b.set("#c-tz", "Europe/Paris")
	b.set("#c-ssh-key", pub)
	b.run("create", chromedp.Click(chromedp.CSS("#create-form button[type=submit]")))
	b.waitJS("the bad cron on its field", `document.querySelector('[name=schedules].invalid') && document.querySelector('#create-form .form-errors').innerText.includes('schedules')`, 30*time.Second)
	b.set("#c-stop-cron", "0 18 * * *")
	b.run("create again", chromedp.Click(chromedp.CSS("#create-form button[type=submit]")))
	b.waitJS("the instance's page", `location.hash === '#/computes/form-instance'`, 30*time.Second)
	c, err := in.client.Compute(ctx, "default", "form-instance")
	if err != nil || c.Instance == nil || c.Instance.IdleTimeBeforeShutdownMinutes != 30 || c.SSHSettings == nil || !c.SSHSettings.HasSSHKeyValue ||
		c.Instance.Schedules == nil || len(c.Instance.Schedules.ComputeStartStop) != 1 {
		t.Fatalf("the instance the form created: %+v %v", c, err)
	}
	if s := c.Instance.Schedules.ComputeStartStop[0]; s.Action != "stop" || s.Trigger.Expression != "0 18 * * *" || s.Trigger.TimeZone != "Europe/Paris" {
		t.Errorf("its schedule: %+v %+v", s, s.Trigger)
	}

	// A cluster with an SSH key: azureuser unless the form names a user.
	b.run("the create form", chromedp.Navigate(base+"/#/create"), chromedp.WaitVisible(chromedp.CSS("#create-form")))
	b.waitJS("the cluster fields", `!document.querySelector('#cluster-fields').hidden`, 10*time.Second)
	b.set("#c-name", "form-cluster")
	b.set("#c-ssh-key", pub)
	b.run("create", chromedp.Click(chromedp.CSS("#create-form button[type=submit]")))
	b.waitJS("the cluster's page", `location.hash === '#/computes/form-cluster'`, 30*time.Second)
	cl, err := in.client.Compute(ctx, "default", "form-cluster")
	if err != nil || cl.SSHSettings == nil || cl.SSHSettings.AdminUsername != "azureuser" || !cl.SSHSettings.HasSSHKeyValue || cl.MaxInstances != 2 {
		t.Fatalf("the cluster the form created: %+v %v", cl, err)
	}
	if strings.Contains(b.text(), pub) {
		t.Error("the compute's page shows the SSH key it was given")
	}
	_ = in.client.DeleteCompute(ctx, "default", "form-instance")
}
