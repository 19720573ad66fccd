package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TestStudioEditYAML: a compute's page edits it as its YAML file. The file
// has no server-set field and no SSH key (never returned), and saving it
// keeps the key; a bad value shows its line; a change made meanwhile
// elsewhere is not overwritten (If-Match), the page offers the current
// file instead.
func TestStudioEditYAML(t *testing.T) {
	b := newBrowser(t)
	in, _ := newServer(t)
	base := in.cfg.AdvertiseURL
	ctx := context.Background()
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGjvJ0l3v9m1n3yq0s3xJ6zq8o1b0bqXbq0m3w1s1q9x studio@test"
	createCompute(t, in, "name: yaml-edit\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 2\nssh_settings:\n  admin_username: azureuser\n  ssh_key_value: "+key+"\n")

	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.run("sign in", chromedp.SendKeys(chromedp.CSS("#token"), in.srv.AdminToken), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("signed in", `!document.querySelector('#token')`, 30*time.Second)
	b.run("the compute's page", chromedp.Navigate(base+"/#/computes/yaml-edit"))
	b.waitJS("its YAML", `(document.querySelector('#edit-yaml') || {}).value.includes('max_instances: 2')`, 30*time.Second)
	y := eval[string](b, `document.querySelector('#edit-yaml').value`)
	for _, server := range []string{"etag", "provisioning_state", "current_node_count", "ssh-ed25519", "has_ssh_key_value"} {
		if strings.Contains(y, server) {
			t.Errorf("the editable YAML holds %s:\n%s", server, y)
		}
	}
	if _, err := spec.ParseCompute("yaml-edit.yml", []byte(y), nil); err != nil {
		t.Fatalf("the editable YAML does not parse: %v\n%s", err, y)
	}

	// A bad value: the error names its line.
	b.set("#edit-yaml", strings.Replace(y, "max_instances: 2", "max_instances: -1", 1))
	b.run("save a bad file", chromedp.Click(chromedp.CSS("#edit-yaml-form button[type=submit]")))
	b.waitJS("the error with its line", `(() => { const t = document.querySelector('#edit-yaml-form .form-errors').innerText; return /line \d+: max_instances/.test(t); })()`, 30*time.Second)

	// A good one: saved, the key kept.
	b.set("#edit-yaml", strings.Replace(y, "max_instances: 2", "max_instances: 3", 1)+"description: edited in Studio\n")
	b.run("save", chromedp.Click(chromedp.CSS("#edit-yaml-form button[type=submit]")))
	b.waitJS("saved", `document.querySelector('#edit-yaml-form .form-errors').innerText.includes('Saved.')`, 30*time.Second)
	c, err := in.client.Compute(ctx, "default", "yaml-edit")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInstances != 3 || c.Description != "edited in Studio" || c.SSHSettings == nil || !c.SSHSettings.HasSSHKeyValue {
		t.Fatalf("after saving: max %d, description %q, ssh %+v", c.MaxInstances, c.Description, c.SSHSettings)
	}

	// Changed elsewhere meanwhile: the save is refused, the current file offered.
	y = eval[string](b, `document.querySelector('#edit-yaml').value`)
	max := 4
	if _, err := in.client.PatchCompute(ctx, "default", "yaml-edit", api.ComputePatch{MaxInstances: &max}); err != nil {
		t.Fatal(err)
	}
	b.set("#edit-yaml", strings.Replace(y, "max_instances: 3", "max_instances: 5", 1))
	b.run("save over a newer version", chromedp.Click(chromedp.CSS("#edit-yaml-form button[type=submit]")))
	b.waitJS("the conflict", `document.querySelector('#edit-yaml-form .form-errors').innerText.includes('changed since you opened it')`, 30*time.Second)
	if c, _ := in.client.Compute(ctx, "default", "yaml-edit"); c.MaxInstances != 4 {
		t.Fatalf("a stale save overwrote max_instances: %d", c.MaxInstances)
	}
	b.run("load the current file", chromedp.Click(chromedp.CSS("#edit-yaml-form .form-errors button")))
	b.waitJS("the current file", `document.querySelector('#edit-yaml').value.includes('max_instances: 4')`, 30*time.Second)

	// The scale form beside it says Saved too (it showed a script error).
	b.set("#f-max_instances", "6")
	b.run("save the scale settings", chromedp.Click(chromedp.CSS("#scale-form button[type=submit]")))
	b.waitJS("scale settings saved", `document.querySelector('#scale-form .form-errors').innerText.includes('Saved.')`, 30*time.Second)
	if c, _ := in.client.Compute(ctx, "default", "yaml-edit"); c.MaxInstances != 6 {
		t.Fatalf("scale form: max_instances %d, want 6", c.MaxInstances)
	}
}

// A cluster created with ssh_settings but neither a password nor a key is
// refused naming the field (the check moved from the parser to creation,
// so that an update may leave the stored key out).
func TestComputeSSHCredentialsRequired(t *testing.T) {
	in, _ := newServer(t)
	c, err := spec.ParseCompute("c.yml", []byte("name: nokey\ntype: amlcompute\nsize: Standard_DS3_v2\nssh_settings:\n  admin_username: azureuser\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = in.client.PutCompute(context.Background(), "default", c)
	if err == nil || !strings.Contains(err.Error(), "ssh_settings") || !strings.Contains(err.Error(), "set admin_password or ssh_key_value") {
		t.Fatalf("a cluster with ssh_settings and no key: %v", err)
	}
}
