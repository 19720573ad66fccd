package controller

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// TestBackoffCountsAScaleUpOnce: the nodes of one scale-up fail together
// when capacity is unavailable (a location out of a size fails each
// Create). Their failures are one failed round, not eight: the back-off
// after it is the first step's (1 s), not 2^7 s, so a short outage does not
// keep jobs waiting minutes after capacity is back (the chaos suite's
// capacity-unavailable scenario found this). The next round, after the
// back-off, doubles it.
func TestBackoffCountsAScaleUpOnce(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		return tx.PutCompute(ctx, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 8}, "")
	}); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Store: st, Config: config.Default(), Hub: NewHub(), Changes: NewBroadcast(), Log: slog.New(slog.DiscardHandler)})
	now := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	for i := range 8 { // eight creations of one scale-up fail within 10 ms
		c.recordFailure(ctx, "default", "c", "ProvisioningFailed", "insufficient capacity", now.Add(time.Duration(i)*time.Millisecond))
	}
	b := c.backoff[key("default", "c")]
	if want := now.Add(time.Second); b.Failures != 1 || !b.Until.Equal(want) {
		t.Fatalf("after one failed scale-up of 8 nodes: %d failure(s), back-off until %s; want 1, until %s", b.Failures, b.Until.Format(time.StampMilli), want.Format(time.StampMilli))
	}
	later := now.Add(1500 * time.Millisecond) // the next round, after the back-off
	c.recordFailure(ctx, "default", "c", "ProvisioningFailed", "insufficient capacity", later)
	b = c.backoff[key("default", "c")]
	if want := later.Add(2 * time.Second); b.Failures != 2 || !b.Until.Equal(want) {
		t.Fatalf("after a second round: %d failure(s), back-off until %s; want 2, until %s", b.Failures, b.Until.Format(time.StampMilli), want.Format(time.StampMilli))
	}
}
