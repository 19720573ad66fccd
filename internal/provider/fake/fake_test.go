package fake_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/fake"
	"github.com/tideml/tide/internal/provider/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) func() provider.Provider {
		p := fake.New()
		return func() provider.Provider { return p }
	})
}

func TestProgrammedErrors(t *testing.T) {
	ctx := t.Context()
	p := fake.New()
	boom := errors.New("boom")
	p.NextCreateErr = boom
	if _, err := p.Create(ctx, providertest.Request("a")); !errors.Is(err, boom) {
		t.Fatalf("Create: %v, want boom", err)
	}
	if _, err := p.Create(ctx, providertest.Request("a")); err != nil {
		t.Fatalf("Create after the programmed error: %v", err)
	}
	p.MaxNodes = 1
	if _, err := p.Create(ctx, providertest.Request("b")); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("Create beyond MaxNodes: %v", err)
	}
	if len(p.CreateCalls) != 3 {
		t.Fatalf("CreateCalls = %d, want 3", len(p.CreateCalls))
	}
	if err := p.Preempt(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Get(ctx, "a"); n.State != provider.StatePreempted {
		t.Fatalf("state after Preempt = %s", n.State)
	}
	p.Reset()
	if l, _ := p.List(ctx); len(l) != 0 || len(p.CreateCalls) != 0 {
		t.Fatal("Reset left state behind")
	}
}

func TestTokenDir(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "tokens")
	p, err := fake.Factory("fake", map[string]any{"token_dir": dir}, provider.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	req := providertest.Request("a")
	req.Token = "secret-a"
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "a"))
	if err != nil || string(b) != "secret-a" {
		t.Fatalf("token file = %q, %v; want the node's token", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v, want 0600", fi.Mode().Perm())
	}
	if err := p.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("token file after Delete: %v, want it gone", err)
	}
	if _, err := fake.Factory("fake", map[string]any{"tokens": dir}, provider.Deps{}); err == nil || !strings.Contains(err.Error(), "tokens: not a setting of the fake provider") {
		t.Fatalf("unknown setting: %v, want it refused by name", err)
	}
}
