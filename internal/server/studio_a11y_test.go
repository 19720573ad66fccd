package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/tideml/tide/api"
)

// contrastJS lists the elements on the page whose own visible text fails
// WCAG 2.1 AA contrast against the background behind it (4.5:1, or 3:1
// for large text: 24 px, or 18.66 px bold), as "text (ratio)".
const contrastJS = `(() => {
  const rgb = s => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const over = (top, under) => ({r: top.r * top.a + under.r * (1 - top.a), g: top.g * top.a + under.g * (1 - top.a), b: top.b * top.a + under.b * (1 - top.a), a: 1});
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; } }
    let c = {r: 255, g: 255, b: 255, a: 1};
    for (let i = layers.length - 1; i >= 0; i--) c = over(layers[i], c);
    return c;
  };
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent.trim()).join(' ').trim();
    if (!own) continue;
    const st = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    if (st.visibility === 'hidden' || st.display === 'none' || r.width === 0 || r.height === 0 || el.closest('.sr, .skip, canvas, [hidden]')) continue;
    const bg = background(el), fg = over(rgb(st.color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(st.fontSize), bold = Number(st.fontWeight) >= 700;
    const need = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
    if (ratio < need) bad.push(own.slice(0, 40) + ' (' + ratio.toFixed(2) + ')');
  }
  return bad.join('; ');
})()`

// unreachableJS lists the elements that act on a click but cannot be
// reached from the keyboard: clickable roles without a tab stop, and
// links without an href.
const unreachableJS = `(() => [...document.querySelectorAll('[onclick], [role=button], [role=tab], a')]
  .filter(el => !el.closest('[hidden]') && el.tabIndex < 0 && !(el.tagName === 'A' && el.hasAttribute('href')) && el.id !== 'main')
  .map(el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' ' + el.textContent.trim().slice(0, 30)).join('; '))()`

// TestStudioAccessible: every page of Studio a user reaches (sign-in,
// computes, a compute's tabs, create, jobs, a job, cost, usage) keeps
// WCAG AA text contrast and has no control the keyboard cannot reach; and
// a keyboard-only user can sign in, move through the main navigation and
// open a page with Enter, with the focus visible.
func TestStudioAccessible(t *testing.T) {
	b := newBrowser(t)
	in, _ := newServer(t)
	base := in.cfg.AdvertiseURL
	createCompute(t, in, "name: a11y\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 5\n")
	j := submit(t, in, "command: echo accessible\ncompute: a11y\n")
	if got := waitJob(t, in, j.Name, 90*time.Second); got.Status != api.JobCompleted {
		t.Fatalf("job: %s %s", got.Status, got.Error)
	}
	check := func(page string) {
		t.Helper()
		if bad := eval[string](b, contrastJS); bad != "" {
			t.Errorf("%s: text below WCAG AA contrast: %s", page, bad)
		}
		if bad := eval[string](b, unreachableJS); bad != "" {
			t.Errorf("%s: controls the keyboard cannot reach: %s", page, bad)
		}
	}

	// Sign in from the keyboard: the token field has the focus (or is the
	// first stop), typing and Enter submit the form.
	b.run("open Studio", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	check("sign-in")
	b.run("focus the token", chromedp.Focus(chromedp.CSS("#token")))
	b.run("type the token and press Enter", chromedp.KeyEvent(in.srv.AdminToken), chromedp.KeyEvent(kb.Enter))
	b.waitJS("signed in", `document.querySelector('#nav') && !document.querySelector('#token') && document.body.innerText.includes('a11y')`, 30*time.Second)

	// Tab on: Studio puts the focus on the page's content when it opens a
	// page; tabbing goes through the content, wraps, and reaches the skip
	// link and the main navigation, every stop with a visible outline.
	b.run("reload", chromedp.Navigate(base+"/#/computes"))
	b.waitJS("the computes page", `document.body.innerText.includes('a11y')`, 30*time.Second)
	var stops []string
	for range 12 {
		b.run("Tab", chromedp.KeyEvent(kb.Tab))
		stop := eval[string](b, `(() => { const e = document.activeElement; const st = getComputedStyle(e);
			if (e === document.body) return 'BODY';
			return (e.id || e.getAttribute('href') || e.tagName) + (st.outlineStyle !== 'none' && parseFloat(st.outlineWidth) > 0 ? '' : ' (no focus outline)'); })()`)
		stops = append(stops, stop)
	}
	got := strings.Join(stops, " ")
	for _, want := range []string{"#main", "#/computes", "#/jobs", "#/cost"} {
		if !strings.Contains(got, want) {
			t.Errorf("tab stops from the top: %s; want %s among them", got, want)
		}
	}
	if strings.Contains(got, "no focus outline") || !strings.Contains(got, "#main") {
		t.Errorf("tab stops: %s; want the skip link (#main) and a visible focus on each", got)
	}
	// Enter on the Jobs link opens the jobs page.
	b.run("focus Jobs", chromedp.Focus(chromedp.CSS(`#nav a[href="#/jobs"]`)), chromedp.KeyEvent(kb.Enter))
	b.waitJS("the jobs page", `location.hash.startsWith('#/jobs') && document.body.innerText.includes(`+fmt.Sprintf("%q", j.Name)+`)`, 30*time.Second)

	for _, p := range []struct{ hash, ready string }{
		{"#/computes", `document.body.innerText.includes('a11y')`},
		{"#/computes/a11y", `document.querySelector('h1') && document.querySelector('h1').innerText.includes('a11y')`},
		{"#/computes/a11y/nodes", `document.querySelector('#tab-nodes')`},
		{"#/computes/a11y/events", `document.body.innerText.length > 0 && !document.querySelector('.loading')`},
		{"#/create", `document.querySelector('#create-form')`},
		{"#/jobs", `document.body.innerText.includes(` + fmt.Sprintf("%q", j.Name) + `)`},
		{"#/jobs/" + j.Name, `document.querySelector('#log') && document.querySelector('#log').innerText.includes('accessible')`},
		{"#/cost", `!document.querySelector('.loading')`},
		{"#/usage", `!document.querySelector('.loading')`},
	} {
		b.run("open "+p.hash, chromedp.Navigate(base+"/"+p.hash))
		b.waitJS(p.hash, p.ready, 30*time.Second)
		time.Sleep(300 * time.Millisecond) // the page's own fetches settle
		check(p.hash)
	}
}
