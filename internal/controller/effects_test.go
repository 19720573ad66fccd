package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/fake"
	"github.com/tideml/tide/internal/store"
)

func TestJudgeCheck(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	grace := 10 * time.Second
	gone := &provider.NotFoundError{ID: "n"}
	down := errors.New("host h: unreachable")
	node := func(state string, since time.Duration) api.Node {
		return api.Node{ID: "n", State: state, StateSince: now.Add(-since), Error: "stopping"}
	}
	tests := []struct {
		name    string
		n       api.Node
		pn      *provider.Node
		err     error
		verdict int
		reason  string
	}{
		{"running agent", node(api.NodeIdle, time.Minute), &provider.Node{State: provider.StateRunning}, nil, checkKeep, ""},
		{"agent exited", node(api.NodeRunning, time.Minute), &provider.Node{State: provider.StateExited, Reason: "oom"}, nil, checkUnusable, "agent exited: oom"},
		{"not held", node(api.NodeIdle, time.Minute), nil, gone, checkUnusable, "the provider no longer holds the node"},
		{"host down", node(api.NodeIdle, time.Minute), nil, down, checkUnknown, down.Error()},
		{"preempted", node(api.NodeRunning, time.Minute), &provider.Node{State: provider.StatePreempted}, nil, checkPreempted, "the provider took the node away"},
		{"pending reason", node(api.NodePreparing, time.Second), &provider.Node{State: provider.StateRunning, Reason: "Resources"}, nil, checkPending, "Resources"},
		{"leaving, still stopping", node(api.NodeLeaving, time.Second), &provider.Node{State: provider.StateRunning}, nil, checkKeep, ""},
		{"leaving, gone", node(api.NodeLeaving, time.Second), nil, gone, checkRemove, "stopping"},
		{"leaving, host down past grace", node(api.NodeLeaving, time.Minute), nil, down, checkRemove, "stopping"},
		{"leaving, host down within grace", node(api.NodeLeaving, time.Second), nil, down, checkUnknown, down.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, r := judgeCheck(tt.n, tt.pn, tt.err, now, grace)
			if v != tt.verdict || r != tt.reason {
				t.Errorf("judgeCheck = %d %q; want %d %q", v, r, tt.verdict, tt.reason)
			}
		})
	}
}

func TestMayHaveCreated(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("creating node n: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("ssh: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{errors.New(`pods "tide-n" is forbidden: User cannot create resource "pods"`), false},
		{fmt.Errorf("creating node n: %w", &provider.InsufficientCapacityError{}), false},
	} {
		if got := mayHaveCreated(c.err); got != c.want {
			t.Errorf("mayHaveCreated(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestChecksReadNoNodes: the periodic provider checks take the nodes the
// last turn read, not the store's (at 10,000 nodes that read was 8 % of
// the server's CPU while the nodes only heartbeat), and a node whose
// agent the provider says exited is still made unusable by the next turn.
func TestChecksReadNoNodes(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t).(counted)
	now := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	p := fake.New()
	if _, err := p.Create(ctx, provider.NodeRequest{ID: "n1", Workspace: "ws", Compute: "cpu", Location: "sim"}); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		cp := &api.Compute{Workspace: "ws", Name: "cpu", Location: "sim", Size: "Standard_DS3_v2", MinInstances: 1, MaxInstances: 1, ProvisioningState: api.ProvisioningSucceeded}
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return err
		}
		return tx.PutNode(ctx, &api.Node{ID: "n1", Workspace: "ws", Compute: "cpu", Location: "sim", State: api.NodeIdle, StateSince: now, LastHeartbeat: now})
	})
	c := New(Options{Store: st, Catalog: catalog.Default(), Config: config.Default(), Providers: map[string]provider.Provider{"sim": p},
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, NodeToken: func(string) string { return "" }})
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if n := getNode(t, st, "n1"); n == nil || n.State != api.NodeIdle {
		t.Fatalf("node n1 is %v after the first turn, want idle", n)
	}
	if err := p.SetState("n1", provider.StateExited, "killed"); err != nil {
		t.Fatal(err)
	}
	// The turn's samples are written in the background.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c.mu.Lock()
		sampling := c.sampling
		c.mu.Unlock()
		if !sampling {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first turn's samples were not written in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	before := st.Statements()
	c.startChecks(ctx)
	select {
	case <-c.kick: // the round ended
	case <-time.After(10 * time.Second):
		t.Fatal("the provider checks did not end in 10 s")
	}
	if n := st.Statements() - before; n != 0 {
		t.Errorf("the provider checks ran %d statements, want none (the last turn's nodes)", n)
	}
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	// Made unusable, then removed (its compute keeps one node).
	if n := getNode(t, st, "n1"); n != nil && n.State != api.NodeUnusable {
		t.Errorf("node n1 is %s after its agent exited and a check, want unusable or removed", n.State)
	}
}

// getNode reads node id from st (nil: not found).
func getNode(t *testing.T, st store.Store, id string) *api.Node {
	t.Helper()
	var n *api.Node
	err := st.View(context.Background(), func(tx store.Tx) (err error) {
		n, err = tx.GetNode(context.Background(), id)
		return err
	})
	if store.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCheckRoundCopiesNoNodes: a round of provider checks carries each
// node's id and state, not copies of its record (at 10,000 nodes the
// copies were 40 MB a round, most of what a heartbeating server
// allocated). With the turn that applies them: 5.4 KB a node before,
// 2.0 KB after.
func TestCheckRoundCopiesNoNodes(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	now := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	p := fake.New()
	const nodes = 2000
	mustUpdate(t, st, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		cp := &api.Compute{Workspace: "ws", Name: "cpu", Location: "sim", Size: "Standard_DS3_v2", MinInstances: nodes, MaxInstances: nodes,
			ProvisioningState: api.ProvisioningSucceeded}
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return err
		}
		for i := range nodes {
			id := fmt.Sprintf("n%04d", i)
			if _, err := p.Create(ctx, provider.NodeRequest{ID: id, Workspace: "ws", Compute: "cpu", Location: "sim"}); err != nil {
				return err
			}
			if err := tx.PutNode(ctx, &api.Node{ID: id, Workspace: "ws", Compute: "cpu", Location: "sim", State: api.NodeIdle, StateSince: now, LastHeartbeat: now}); err != nil {
				return err
			}
		}
		return nil
	})
	cfg := config.Default()
	cfg.SampleInterval = 0 // no samples in the background
	c := New(Options{Store: st, Catalog: catalog.Default(), Config: cfg, Providers: map[string]provider.Provider{"sim": p},
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c.startChecks(ctx)
	<-c.kick // the round ended
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	perNode := float64(m1.TotalAlloc-m0.TotalAlloc) / nodes
	t.Logf("%.0f bytes a node", perNode)
	if perNode > 3000 {
		t.Errorf("a round of checks and the turn that applied it allocated %.0f bytes a node, want under 3,000", perNode)
	}
}
