package local_test

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/local"
	"github.com/tideml/tide/internal/provider/providertest"
)

// TestCapacityUnavailable: during the outage's window Create fails with an
// insufficient-capacity error naming the setting and when capacity returns
// (the controller waits and retries such errors); before and after the
// window, Create starts nodes.
func TestCapacityUnavailable(t *testing.T) {
	dataDir := t.TempDir()
	cleanup(t, dataDir)
	var mu sync.Mutex
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	p, err := local.New(local.Config{
		AgentCommand: []string{os.Args[0], "agent"}, DataDir: dataDir, GracePeriod: 5 * time.Second,
		Env: []string{"TIDE_TEST_AGENT=1"}, Now: clock,
		CapacityUnavailable: local.Outage{After: time.Minute, For: 5 * time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := p.Create(ctx, providertest.Request("before")); err != nil {
		t.Fatalf("Create before the outage: %v", err)
	}
	advance(time.Minute)
	_, err = p.Create(ctx, providertest.Request("during"))
	if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "capacity unavailable until 12:06:00 UTC") ||
		!strings.Contains(err.Error(), "capacity_unavailable_for") {
		t.Fatalf("Create during the outage: %v, want insufficient capacity until 12:06:00 naming capacity_unavailable_for", err)
	}
	if n, err := p.Get(ctx, "before"); err != nil || n.State != provider.StateRunning {
		t.Fatalf("a node created before the outage: %+v, %v; want it running", n, err)
	}
	advance(5*time.Minute - time.Second)
	if _, err := p.Create(ctx, providertest.Request("during")); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("Create a second before the outage ends: %v", err)
	}
	advance(time.Second)
	if _, err := p.Create(ctx, providertest.Request("after")); err != nil {
		t.Fatalf("Create after the outage: %v", err)
	}
}
