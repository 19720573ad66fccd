package controller

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// TestSimulatedEvictions checks the server setting that preempts
// low-priority nodes at random: the probability per turn follows the rate
// and the time since the last turn, and dedicated nodes are never touched.
func TestSimulatedEvictions(t *testing.T) {
	tests := []struct {
		name string
		rate float64 // per node-hour
		draw float64 // what the random source returns
		dt   time.Duration
		want string // state of the low-priority node afterwards
	}{
		{"rate 0 never preempts", 0, 0, time.Hour, api.NodeRunning},
		// 1-exp(-3600/h × 1s) = 0.63: a draw of 0.5 preempts, 0.7 does not.
		{"likely event happens", 3600, 0.5, time.Second, api.NodePreempted},
		{"unlikely draw spares", 3600, 0.7, time.Second, api.NodeRunning},
		// 1-exp(-1/h × 1s) = 0.00028.
		{"low rate spares", 1, 0.001, time.Second, api.NodeRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
			err = st.Update(ctx, func(tx store.Tx) error {
				if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
					return err
				}
				for _, c := range []api.Compute{
					{Name: "spot", Workspace: "default", Tier: api.TierLowPriority, MaxInstances: 1},
					{Name: "dedicated", Workspace: "default", Tier: api.TierDedicated, MaxInstances: 1},
				} {
					if err := tx.PutCompute(ctx, &c, ""); err != nil {
						return err
					}
					n := api.Node{ID: c.Name + "-1", Workspace: "default", Compute: c.Name, State: api.NodeRunning, StateSince: now}
					if err := tx.PutNode(ctx, &n); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			cfg := config.Default()
			cfg.PreemptionRate = tt.rate
			c := New(Options{Store: st, Config: cfg, Hub: NewHub(), Changes: NewBroadcast(), Log: slog.New(slog.DiscardHandler),
				Rand: func() float64 { return tt.draw }})
			for _, at := range []time.Time{now, now.Add(tt.dt)} {
				s, err := c.load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.preempting(ctx, s, at); err != nil {
					t.Fatal(err)
				}
			}
			states := map[string]string{}
			_ = st.View(ctx, func(tx store.Tx) error {
				ns, err := tx.ListNodes(ctx, "", "")
				for _, n := range ns {
					states[n.Compute] = n.State
				}
				return err
			})
			if states["spot"] != tt.want || states["dedicated"] != api.NodeRunning {
				t.Errorf("states %v, want spot %s and dedicated running", states, tt.want)
			}
		})
	}
}
