package service

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/instance"
	"github.com/tideml/tide/internal/store"
)

// Heartbeats that arrive together are written in one transaction (group
// commit). At 10,000 nodes each heartbeat was its own write transaction:
// SQLite's one writer spent its time beginning and committing them, and a
// submission waited behind a thousand of them a second. A heartbeat is
// still answered only once the transaction that holds it has committed.
// There is no added wait: a batch is written as soon as the writer is
// free, so an idle server writes each heartbeat alone, at once.

// heartbeatWriteTimeout bounds one batch's transaction; the agents whose
// heartbeats it held retry at their next beat.
const heartbeatWriteTimeout = 30 * time.Second

// heartbeats collects the heartbeats waiting for the writer.
type heartbeats struct {
	mu      sync.Mutex
	next    *beatBatch // collecting; nil when none waits
	writing bool       // a goroutine is writing batches
}

// beatBatch is the heartbeats of one transaction.
type beatBatch struct {
	beats map[string]api.AgentHeartbeat // by node: a later beat replaces an earlier one
	done  chan struct{}                 // closed once written (or failed)
	err   error                         // the transaction's
	errs  map[string]error              // by node: its record is gone
}

// Heartbeat records that a node's agent is alive, and what it measured.
func (s *Service) Heartbeat(ctx context.Context, nodeID string, hb api.AgentHeartbeat) error {
	g := &s.beats
	g.mu.Lock()
	b := g.next
	if b == nil {
		b = &beatBatch{beats: map[string]api.AgentHeartbeat{}, done: make(chan struct{})}
		g.next = b
	}
	b.beats[nodeID] = hb
	if !g.writing {
		g.writing = true
		go s.writeHeartbeats()
	}
	g.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if b.err != nil {
		return b.err
	}
	return b.errs[nodeID]
}

// writeHeartbeats writes the waiting batch, then the one collected
// meanwhile, until none is left.
func (s *Service) writeHeartbeats() {
	g := &s.beats
	for {
		g.mu.Lock()
		b := g.next
		g.next = nil
		if b == nil {
			g.writing = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), heartbeatWriteTimeout)
		b.err = s.Store.Update(ctx, func(tx store.Tx) error {
			b.errs = map[string]error{} // PostgreSQL may run this again
			// In key order, so that two transactions never lock nodes in
			// opposite orders.
			for _, id := range slices.Sorted(maps.Keys(b.beats)) {
				err := s.heartbeat(ctx, tx, id, b.beats[id])
				if store.IsNotFound(err) {
					b.errs[id] = notFound("node", id, "the node was deleted; stop this agent")
					continue
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		close(b.done)
	}
}

// heartbeat records one node's heartbeat in tx. A heartbeat writes the
// node's heartbeat fields alone (store.Tx.PutNodeBeat): it neither decodes
// nor rewrites the node's record, and is no change for the controller's
// node feed. One that reports activity (a compute instance's node, whose
// idle shutdown the controller decides from it) writes the whole record.
func (s *Service) heartbeat(ctx context.Context, tx store.Tx, nodeID string, hb api.AgentHeartbeat) error {
	now := s.now()
	if hb.Activity != nil {
		n, err := tx.GetNode(ctx, nodeID)
		if err != nil {
			return err
		}
		b := store.BeatOf(n)
		applyBeat(&b, n.Job, hb, now)
		b.Apply(n)
		n.Activity = hb.Activity
		if busy, _ := instance.Active(hb.Activity, n.Job); busy {
			n.ActiveAt = now
		}
		return tx.PutNode(ctx, n)
	}
	job, b, err := tx.GetNodeBeat(ctx, nodeID)
	if err != nil {
		return err
	}
	applyBeat(&b, job, hb, now)
	return tx.PutNodeBeat(ctx, nodeID, b)
}

// applyBeat sets b to what heartbeat hb, of a node running job, says.
func applyBeat(b *store.NodeBeat, job string, hb api.AgentHeartbeat, now time.Time) {
	b.LastHeartbeat = now
	b.Utilization = hb.Utilization
	if hb.Cache != nil {
		b.Cache = hb.Cache
	}
	if u, ok := hb.Usage[job]; ok {
		b.JobUsage = &u
	} else {
		b.JobUsage = nil
	}
}
