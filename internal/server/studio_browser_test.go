package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser is a real headless Chromium (Debian's chromium) driven over the
// DevTools protocol, for Studio's tests.
type browser struct {
	t   *testing.T
	ctx context.Context
	// shots is where screenshots are saved (TIDE_STUDIO_SCREENSHOTS, else a
	// temporary folder).
	shots string
}

// chromiumPath finds Chromium; under CI it must be there (.ci/run
// installs it), elsewhere the test skips without it.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

func newBrowser(t *testing.T) *browser {
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser; its context lives as long as the
	// test, so later steps can time out without closing the tab.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	shots := os.Getenv("TIDE_STUDIO_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, shots: shots}
}

// run does actions, failing the test with what after 60 s.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.text())
	}
}

// text is the page's visible text, for failure messages.
func (b *browser) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	return s
}

// eval evaluates a JavaScript expression.
func eval[T any](b *browser, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v\npage: %s", expr, err, b.text())
	}
	return v
}

// set sets a form field's value as typing would (an input event follows).
func (b *browser) set(selector, value string) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf(`(() => { const el = document.querySelector(%q); el.value = %q; el.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, selector, value))
}

// waitJS waits until a JavaScript expression is true.
func (b *browser) waitJS(what, expr string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!(`+expr+`)`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out after %s waiting for %s (%s; err %v)\npage: %s", d, what, expr, err, b.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shot saves a screenshot of the page at 1280 px and at a phone's 390 px.
func (b *browser) shot(name string) {
	b.t.Helper()
	for _, w := range []struct {
		suffix        string
		width, height int64
		mobile        bool
	}{{"", 1280, 900, false}, {"-phone", 390, 844, true}} {
		emulate := chromedp.EmulateViewport(w.width, w.height)
		if w.mobile {
			emulate = chromedp.EmulateViewport(w.width, w.height, chromedp.EmulateMobile)
		}
		b.run("viewport for "+name, emulate)
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		cancel()
		if err != nil {
			b.t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(b.shots, name+w.suffix+".png"), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	b.run("back to the desktop width", chromedp.EmulateViewport(1280, 900))
}
