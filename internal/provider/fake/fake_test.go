package fake_test

import (
	"errors"
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
