package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// gatedStore holds its first write transaction until release is closed,
// and counts write transactions.
type gatedStore struct {
	store.Store
	release chan struct{}
	updates atomic.Int64
}

func (g *gatedStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if g.updates.Add(1) == 1 {
		<-g.release
	}
	return g.Store.Update(ctx, fn)
}

// failingJobs is a store whose reads of job "broken" fail, as PostgreSQL
// fails a read it cannot make. It counts the savepoints taken.
type failingJobs struct {
	store.Store
	savepoints *atomic.Int64
}

func (f failingJobs) Update(ctx context.Context, fn func(store.Tx) error) error {
	return f.Store.Update(ctx, func(tx store.Tx) error { return fn(failingJobsTx{tx, f.savepoints}) })
}

type failingJobsTx struct {
	store.Tx
	savepoints *atomic.Int64
}

func (t failingJobsTx) Savepoint(ctx context.Context, fn func() error) error {
	t.savepoints.Add(1)
	return t.Tx.Savepoint(ctx, fn)
}

func (t failingJobsTx) GetJob(ctx context.Context, ws, name string) (*api.Job, error) {
	if name == "broken" {
		return nil, errors.New("ERROR: invalid byte sequence (SQLSTATE 22021)")
	}
	return t.Tx.GetJob(ctx, ws, name)
}

// TestHeartbeatsShareTransactions: heartbeats that arrive while one is
// being written are written together in the next transaction, each
// answered once that committed; a node whose record is gone gets its own
// not-found answer, and one whose heartbeat the store fails on gets its
// own error, without failing the others. Only a heartbeat that needs the
// store's reads takes a savepoint.
func TestHeartbeatsShareTransactions(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const nodes = 50
	if err := st.Update(ctx, func(tx store.Tx) error {
		for i := range nodes {
			if err := tx.PutNode(ctx, &api.Node{ID: fmt.Sprintf("n%d", i), Workspace: "default", Compute: "c", State: api.NodeIdle}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	savepoints := new(atomic.Int64)
	g := &gatedStore{Store: failingJobs{st, savepoints}, release: make(chan struct{})}
	s := &Service{Store: g}
	ids := []string{"first"} // written alone, held by the gate
	for i := range nodes {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	const broken = 7 // n6 runs a job the store fails to read
	ids = append(ids, "gone")
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	beat := func(i int) {
		defer wg.Done()
		hb := api.AgentHeartbeat{NodeID: ids[i], Utilization: &api.NodeUtilization{CPUPercent: float64(i)}}
		if i == broken {
			hb.Running = []string{"default/broken/1"}
		}
		_, errs[i] = s.Heartbeat(ctx, ids[i], hb)
	}
	wg.Add(1)
	go beat(0)
	for g.updates.Load() == 0 { // the first batch's transaction has begun
		runtime.Gosched()
	}
	for i := 1; i < len(ids); i++ {
		wg.Add(1)
		go beat(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.beats.mu.Lock()
		waiting := 0
		if s.beats.next != nil {
			waiting = len(s.beats.next.beats)
		}
		s.beats.mu.Unlock()
		if waiting == len(ids)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d heartbeats wait for the writer, want %d", waiting, len(ids)-1)
		}
		runtime.Gosched()
	}
	close(g.release)
	wg.Wait()
	if n := g.updates.Load(); n != 2 {
		t.Errorf("%d write transactions for %d heartbeats, want 2 (one alone, then the rest together)", n, len(ids))
	}
	// The batch reads and writes the heartbeats' columns in one statement
	// each; only the node whose agent runs something the store must be
	// asked about takes a savepoint.
	if n := savepoints.Load(); n != 1 {
		t.Errorf("%d savepoints for %d heartbeats, one of them running an assignment the node does not hold: want 1", n, len(ids))
	}
	var nf *Error
	if !errors.As(errs[0], &nf) || nf.Status != 404 {
		t.Errorf("heartbeat of a node without a record: %v, want a 404", errs[0])
	}
	if !errors.As(errs[len(ids)-1], &nf) || nf.Status != 404 {
		t.Errorf("heartbeat of node gone: %v, want a 404", errs[len(ids)-1])
	}
	if err := st.View(ctx, func(tx store.Tx) error {
		for i := 1; i <= nodes; i++ {
			if i == broken {
				if errs[i] == nil || !strings.Contains(errs[i].Error(), "22021") {
					t.Errorf("heartbeat of %s, whose job the store fails to read: %v, want that error", ids[i], errs[i])
				}
				continue
			}
			if errs[i] != nil {
				t.Errorf("heartbeat of %s: %v (another node's error failed it?)", ids[i], errs[i])
			}
			n, err := tx.GetNode(ctx, ids[i])
			if err != nil {
				return err
			}
			if n.LastHeartbeat.IsZero() || n.Utilization == nil || n.Utilization.CPUPercent != float64(i) {
				t.Errorf("node %s after its heartbeat: last %v, utilization %+v", ids[i], n.LastHeartbeat, n.Utilization)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeatEndsARankCanceledBeforeItStarted: the agent refused job B's
// assignment (it still ran a stale one), and B was canceled before the
// assignment was sent again; the cancel pushed for B stopped nothing (the
// agent never ran B). Once the agent runs nothing, its heartbeat must end
// B's rank as canceled and free the node, not send B again (before, the
// job stayed CancelRequested and its node running for good). A job still
// to start is sent again.
func TestHeartbeatEndsARankCanceledBeforeItStarted(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 0, 50, 0, 0, time.UTC)
	for _, c := range []struct {
		status      string
		wantMissing bool
		wantJob     string
	}{
		{api.JobCancelRequested, false, api.JobCanceled},
		{api.JobPreparing, true, api.JobPreparing},
	} {
		st, _ := seedRank(t, "b", c.status, "")
		s := &Service{Store: st, Now: func() time.Time { return now }}
		beat, err := s.Heartbeat(ctx, "n", api.AgentHeartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		var j *api.Job
		var n *api.Node
		if err := st.View(ctx, func(tx store.Tx) (err error) {
			if j, err = tx.GetJob(ctx, "default", "b"); err != nil {
				return err
			}
			n, err = tx.GetNode(ctx, "n")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if beat.Missing != c.wantMissing || j.Status != c.wantJob {
			t.Errorf("job %s: heartbeat says missing %v, job now %s; want %v, %s", c.status, beat.Missing, j.Status, c.wantMissing, c.wantJob)
		}
		if c.status == api.JobCancelRequested && (n.State != api.NodeIdle || n.Job != "") {
			t.Errorf("node after the canceled job's rank ended: %s, job %q; want idle", n.State, n.Job)
		}
	}
}
