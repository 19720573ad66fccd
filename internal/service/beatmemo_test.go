package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
)

// beatConfig heartbeats every second and makes a node unusable after 10 s
// of silence: BeatWritePeriod is 7.5 s.
var beatConfig = config.Server{HeartbeatInterval: time.Second, UnusableAfter: 10 * time.Second}

// TestQuietHeartbeatsAreNotWritten: a heartbeat that says what the last
// written one said is answered from memory for BeatWritePeriod; one that
// says something new (what the agent runs, a utilization that moved) is
// written, as is every heartbeat after the controller sent the node
// something (Recheck), and that one's answer comes from the store.
func TestQuietHeartbeatsAreNotWritten(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	st, id := seedRank(t, "a", api.JobRunning, api.JobRunning)
	release := make(chan struct{})
	close(release)
	g := &gatedStore{Store: st, release: release}
	if p := BeatWritePeriod(beatConfig); p != 7500*time.Millisecond {
		t.Fatalf("BeatWritePeriod = %s, want 7.5s", p)
	}
	s := &Service{Store: g, Config: beatConfig, Now: func() time.Time { return now }}
	beat := func(what string, hb api.AgentHeartbeat, wantWritten bool) Beat {
		t.Helper()
		before := g.updates.Load()
		b, err := s.Heartbeat(ctx, "n", hb)
		if err != nil {
			t.Fatal(err)
		}
		if written := g.updates.Load() > before; written != wantWritten {
			t.Errorf("%s: written %v, want %v", what, written, wantWritten)
		}
		return b
	}
	hb := api.AgentHeartbeat{Running: []string{id}, Utilization: &api.NodeUtilization{CPUPercent: 3}}
	beat("the first heartbeat", hb, true)
	first := now
	for range 7 {
		now = now.Add(time.Second)
		beat("a heartbeat that says nothing new", hb, false)
	}
	now = now.Add(time.Second)
	beat("the heartbeat 8 s after the last written one", hb, true) // after beatLinger
	seen := lastSeen(t, st, "n")
	if !seen.Equal(now) || !seen.After(first) {
		t.Errorf("last_seen %s, want %s", seen, now)
	}

	now = now.Add(time.Second)
	hb.Utilization = &api.NodeUtilization{CPUPercent: 5}
	beat("a utilization that moved by less than 10 % of a core", hb, false)
	hb.Utilization = &api.NodeUtilization{CPUPercent: 55}
	beat("a utilization that moved by 52 % of a core", hb, true)
	hb.Utilization = &api.NodeUtilization{CPUPercent: 48}
	beat("a utilization that moved back by 7 % of a core", hb, false)
	hb.Utilization = &api.NodeUtilization{CPUPercent: 55, MemoryBytes: 1 << 30}
	beat("memory that grew by 1 GiB", hb, true)

	// The job is canceled and the cancel pushed: the node's next
	// heartbeat reconciles with the store, and so does every one until
	// the agent and the store agree again.
	if err := st.Update(ctx, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, "default", "a")
		if err != nil {
			return err
		}
		j.Status, j.Ranks[0].Status = api.JobCanceled, api.JobCanceled
		if err := tx.PutJob(ctx, j, ""); err != nil {
			return err
		}
		n, err := tx.GetNode(ctx, "n")
		if err != nil {
			return err
		}
		n.State, n.Job = api.NodeIdle, ""
		return tx.PutNode(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
	s.Recheck("n")
	now = now.Add(time.Second)
	if b := beat("the heartbeat after a Recheck", hb, true); !slices.Equal(b.Cancel, []string{id}) {
		t.Errorf("the heartbeat after a Recheck says cancel %v, want [%s]", b.Cancel, id)
	}
	now = now.Add(time.Second)
	if b := beat("a heartbeat whose last answer was a cancel", hb, true); !slices.Equal(b.Cancel, []string{id}) {
		t.Errorf("the next heartbeat says cancel %v, want [%s]", b.Cancel, id)
	}
	now = now.Add(time.Second)
	hb.Running = nil
	beat("a heartbeat whose running set changed", hb, true)
	now = now.Add(time.Second)
	beat("the next heartbeat, agent and store agreeing", hb, false)
}

// TestSilentAcrossReplicas: replica A receives a node's heartbeats and
// writes them every BeatWritePeriod; B (another replica, or a leader after
// a failover) never receives them. While the node heartbeats neither
// judges it silent. Once it stops, A finds it silent after UnusableAfter
// and B within UnusableAfter and BeatWritePeriod, never before
// UnusableAfter less an interval.
func TestSilentAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	now := t0
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 1},
		[]*api.Node{{ID: "n", Workspace: "default", Compute: "c", State: api.NodeIdle}},
		&api.Job{Workspace: "default", Name: "done", Type: "command", Command: "true", Compute: "c", Status: api.JobCompleted})
	clock := func() time.Time { return now }
	a := &Service{Store: st, Config: beatConfig, Now: clock}
	b := &Service{Store: st, Config: beatConfig, Now: clock}
	silent := func(s *Service) bool {
		var seen []store.NodeSeen
		if err := st.View(ctx, func(tx store.Tx) (err error) {
			seen, err = tx.NodesSeenBefore(ctx, now.Add(-beatConfig.UnusableAfter))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, x := range seen {
			if x.ID == "n" {
				_, gone := s.Silent(x, now)
				return gone
			}
		}
		return false
	}
	for i := range 38 { // seconds 0 to 37; the last written at 32
		now = t0.Add(time.Duration(i) * time.Second)
		if _, err := a.Heartbeat(ctx, "n", api.AgentHeartbeat{}); err != nil {
			t.Fatal(err)
		}
		if silent(a) || silent(b) {
			t.Fatalf("at %d s, while the node heartbeats: silent to A %v, to B %v", i, silent(a), silent(b))
		}
	}
	last := now
	if seen := lastSeen(t, st, "n"); !seen.Before(last) {
		t.Fatalf("last_seen %s: the last heartbeat (%s) was written; want one answered from memory", seen, last)
	}
	var toA, toB time.Duration
	for toA == 0 || toB == 0 {
		now = now.Add(time.Second)
		if toA == 0 && silent(a) {
			toA = now.Sub(last)
		}
		if toB == 0 && silent(b) {
			toB = now.Sub(last)
		}
	}
	ua, w := beatConfig.UnusableAfter, BeatWritePeriod(beatConfig)
	if toA <= ua || toA > ua+time.Second {
		t.Errorf("silent to A %s after its last heartbeat, want just after %s", toA, ua)
	}
	if toB <= ua-beatConfig.HeartbeatInterval || toB > ua+w {
		t.Errorf("silent to B %s after its last heartbeat, want between %s and %s", toB, ua-beatConfig.HeartbeatInterval, ua+w)
	}
}

// TestDueHeartbeatsShareATransaction: heartbeats written only because
// their write period ran out wait beatLinger for others and are written
// together; one that says something new is written at once, with them.
func TestDueHeartbeatsShareATransaction(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	var nodes []*api.Node
	for i := range 10 {
		nodes = append(nodes, &api.Node{ID: fmt.Sprintf("n%d", i), Workspace: "default", Compute: "c", State: api.NodeIdle})
	}
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 10}, nodes,
		&api.Job{Workspace: "default", Name: "done", Type: "command", Command: "true", Compute: "c", Status: api.JobCompleted})
	release := make(chan struct{})
	close(release)
	g := &gatedStore{Store: st, release: release}
	s := &Service{Store: g, Config: beatConfig, Now: func() time.Time { return now }}
	beatAll := func(n int, hb api.AgentHeartbeat) {
		t.Helper()
		var wg sync.WaitGroup
		for _, nd := range nodes[:n] {
			wg.Go(func() {
				if _, err := s.Heartbeat(ctx, nd.ID, hb); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	beatAll(10, api.AgentHeartbeat{}) // new: written at once, however many transactions
	now = now.Add(8 * time.Second)
	before := g.updates.Load()
	t0 := time.Now()
	beatAll(10, api.AgentHeartbeat{})
	if n := g.updates.Load() - before; n != 1 {
		t.Errorf("%d transactions for 10 heartbeats due at once, want 1", n)
	}
	if d := time.Since(t0); d < beatLinger {
		t.Errorf("heartbeats due were written after %s, want after beatLinger (%s)", d, beatLinger)
	}
	now = now.Add(time.Second)
	t0 = time.Now()
	beatAll(1, api.AgentHeartbeat{Running: []string{"default/x/1"}})
	if d := time.Since(t0); d >= beatLinger {
		t.Errorf("a heartbeat that says something new was answered after %s, want at once", d)
	}
}

// lastSeen is node id's last heartbeat as the store holds it.
func lastSeen(t *testing.T, st store.Store, id string) time.Time {
	t.Helper()
	var n *api.Node
	if err := st.View(context.Background(), func(tx store.Tx) (err error) {
		n, err = tx.GetNode(context.Background(), id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n.LastHeartbeat
}

// TestHeardHeartbeatKeepsANodeAlive: a heartbeat still waiting for the
// writer proves its agent alive. With every heartbeat written (the tests'
// 3 s unusable_after), a writer held up under load made a live node look
// silent and unusable (the clean-clone CI's TestIdleNodesHeldForGangStay).
func TestHeardHeartbeatKeepsANodeAlive(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	st := seedStore(t, &api.Compute{Name: "c", Workspace: "default", MaxInstances: 1},
		[]*api.Node{{ID: "n", Workspace: "default", Compute: "c", State: api.NodeIdle}},
		&api.Job{Workspace: "default", Name: "done", Type: "command", Command: "true", Compute: "c", Status: api.JobCompleted})
	g := &gatedStore{Store: st, release: make(chan struct{})}
	cfg := config.Server{HeartbeatInterval: 500 * time.Millisecond, UnusableAfter: 3 * time.Second}
	var mu sync.Mutex
	now := t0
	s := &Service{Store: g, Config: cfg, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	done := make(chan error)
	go func() {
		_, err := s.Heartbeat(ctx, "n", api.AgentHeartbeat{})
		done <- err
	}()
	for g.updates.Load() == 0 { // the heartbeat waits for the writer
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	now = t0.Add(2 * time.Second)
	mu.Unlock()
	x := store.NodeSeen{ID: "n", LastSeen: t0.Add(-time.Minute)}
	if last, gone := s.Silent(x, t0.Add(2*time.Second)); gone || !last.Equal(t0) {
		t.Errorf("2 s after a heartbeat still being written: silent %v, last heard %s; want alive, heard at %s", gone, last, t0)
	}
	if _, gone := s.Silent(x, t0.Add(4*time.Second)); !gone {
		t.Errorf("4 s after its last heartbeat (unusable_after 3 s): not silent")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
