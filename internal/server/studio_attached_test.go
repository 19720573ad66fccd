package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/spec"
)

// TestStudioShowsAttachedMachine: Studio lists an attached machine with
// its own CPUs and memory as its size, and its page shows the login and
// the host key trusted on first use. (The server listens on loopback, so
// the machine's agent never registers: only the attach matters here.)
func TestStudioShowsAttachedMachine(t *testing.T) {
	b := newBrowser(t)
	l := newSSHLab(t, 1)
	remote := t.TempDir() // the machine's tide folder
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) { c.Attached.Binary, c.Attached.Dir = tideBin, remote })
	defer cleanup(t, in)
	ctx := context.Background()
	key, err := os.ReadFile(l.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := spec.ParseCompute("vm.yml", []byte("name: vm-studio\ntype: virtualmachine\nresource_id: "+l.Hosts[0].IP+"\nssh_settings:\n  admin_username: root\n  ssh_port: 22\n  ssh_private_key_file: id\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// What the CLI sends: the key file's contents.
	c.SSHSettings.SSHPrivateKey, c.SSHSettings.SSHPrivateKeyFile = string(key), ""
	if _, _, err := in.client.PutCompute(ctx, "default", c); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Detached while the lab still runs: nothing is left there.
		if err := in.client.DetachCompute(ctx, "default", "vm-studio", true); err != nil {
			t.Error(err)
		}
		waitFor(t, "the detach", 60*time.Second, func() bool {
			_, err := in.client.Compute(ctx, "default", "vm-studio")
			return api.IsNotFound(err)
		})
		if _, err := os.Stat(filepath.Join(remote, "bin")); !os.IsNotExist(err) {
			t.Errorf("the detach left tide's files in %s", remote)
		}
	}()

	base := in.cfg.AdvertiseURL
	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.run("sign in", chromedp.SendKeys(chromedp.CSS("#token"), in.srv.AdminToken), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("signed in", `!document.querySelector('#token')`, 30*time.Second)
	b.run("the computes list", chromedp.Navigate(base+"/#/computes"))
	b.waitJS("the machine in the list", `document.body.innerText.includes('vm-studio') && document.body.innerText.includes('vCPUs, ')`, 30*time.Second)
	b.run("the machine's page", chromedp.Navigate(base+"/#/computes/vm-studio"))
	b.waitJS("the machine's details", `document.body.innerText.includes('trust on first use')`, 30*time.Second)
	// An attached machine has no scale of its own: no form offers one.
	if eval[bool](b, `!!document.querySelector("#scale-form")`) {
		t.Errorf("the attached machine's page offers scale settings, which the API refuses")
	}
	page := b.text()
	for _, want := range []string{"root@" + l.Hosts[0].IP + " port 22", "SHA256:", "workspace secret vm-studio-ssh-private-key", api.ComputeTypeVirtualMachine} {
		if !strings.Contains(page, want) {
			t.Errorf("the machine's page lacks %q:\n%s", want, page)
		}
	}
}
