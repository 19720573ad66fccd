package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/studio"
)

// TestStudioJupyter: an instance's page links to its Jupyter; the link
// opens Jupyter's own pages through the server's proxy, signed in by
// Studio's cookie alone, and from there Jupyter's scripts start a kernel
// and run 1+1 over its WebSocket. The same cookie sent from another site
// is refused, for a POST and for a WebSocket handshake.
func TestStudioJupyter(t *testing.T) {
	if !needJupyter(t) {
		t.Skip("needs jupyter-notebook")
	}
	b := newBrowser(t)
	in, _ := newServer(t)
	base := in.cfg.AdvertiseURL
	createCompute(t, in, "name: studio-nb\ntype: computeinstance\nsize: Standard_DS3_v2\n")
	waitState(t, in, "studio-nb", api.InstanceRunning, 90*time.Second)
	waitFor(t, "Jupyter available", 90*time.Second, func() bool {
		c := instanceState(t, in, "studio-nb")
		return len(c.Instance.Applications) == 1 && c.Instance.Applications[0].Available
	})

	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.run("sign in", chromedp.SendKeys(chromedp.CSS("#token"), in.srv.AdminToken), chromedp.Click(chromedp.CSS("form.signin button")))
	b.waitJS("signed in", `!document.querySelector('#token')`, 30*time.Second)
	b.run("the instance's page", chromedp.Navigate(base+"/#/computes/studio-nb"))
	b.waitJS("the Jupyter link", `document.querySelector('#app-jupyter')`, 30*time.Second)
	href := eval[string](b, `document.querySelector('#app-jupyter').getAttribute('href')`)
	if href != "/v1/workspaces/default/instances/studio-nb/jupyter/" {
		t.Fatalf("Jupyter link %q", href)
	}

	b.run("open Jupyter", chromedp.Navigate(base+href))
	b.waitJS("Jupyter's own page", `location.pathname.includes('/jupyter/') && document.title.includes('Jupyter') || document.title === 'Home Page - Select or create a notebook'`, 60*time.Second)
	// What Jupyter's scripts do when a notebook opens: start a kernel
	// (a POST, no Studio header) and talk to it over a WebSocket.
	got := eval[string](b, `(async () => {
		const root = location.pathname.replace(/jupyter\/.*$/, 'jupyter/');
		const r = await fetch(root + 'api/kernels', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'});
		if (r.status !== 201) return 'POST api/kernels: ' + r.status + ' ' + await r.text();
		const k = await r.json();
		const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + root + 'api/kernels/' + k.id + '/channels');
		return await new Promise(resolve => {
			const id = 'studio-' + Date.now();
			ws.onerror = () => resolve('WebSocket error');
			ws.onopen = () => ws.send(JSON.stringify({header: {msg_id: id, username: 'studio', session: 'studio', msg_type: 'execute_request', version: '5.3'},
				parent_header: {}, metadata: {}, channel: 'shell',
				content: {code: '1+1', silent: false, store_history: false, user_expressions: {}, allow_stdin: false}}));
			ws.onmessage = ev => {
				const m = JSON.parse(ev.data);
				if (m.parent_header.msg_id === id && m.header.msg_type === 'execute_result') resolve('result ' + m.content.data['text/plain']);
			};
			setTimeout(() => resolve('no result in 60 s'), 60000);
		});
	})()`, chromedp.EvalAwaitPromise)
	if got != "result 2" {
		t.Fatalf("1+1 from Jupyter's page: %s", got)
	}

	// Another site's page holding the same cookie (as a browser would send
	// it) is refused.
	jup := base + href
	for _, c := range []struct{ method, path string }{{"POST", "api/kernels"}, {"GET", "api/kernels"}} {
		req, _ := http.NewRequest(c.method, jup+c.path, strings.NewReader("{}"))
		req.AddCookie(&http.Cookie{Name: studio.CookieName, Value: in.srv.AdminToken})
		req.Header.Set("Origin", "http://evil.example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("%s %s with the cookie from another site: %d, want 403", c.method, c.path, resp.StatusCode)
		}
	}
	// A link followed from elsewhere (a GET without Origin) opens it.
	req, _ := http.NewRequest("GET", jup+"api/kernels", nil)
	req.AddCookie(&http.Cookie{Name: studio.CookieName, Value: in.srv.AdminToken})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET api/kernels with the cookie: %d, want 200", resp.StatusCode)
	}
}
