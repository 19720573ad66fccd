package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/tideml/tide/internal/controller"
	"github.com/tideml/tide/internal/store"
)

// Topics replicas exchange wake-ups on. A message carries no state: the
// receiver reads what changed from the store.
const (
	// topicChanges: something changed (a job submitted, a status
	// reported, log lines appended). Wakes log streams everywhere and the
	// leader's controller. The payload names the process that published
	// it, which ignores its own echo: it woke its own at the change.
	topicChanges = "tide_changes"
	// topicAgents: the controller has something for the node named in the
	// payload. The replica holding that agent's stream sends it.
	topicAgents = "tide_agents"
	// topicSSH: a client waits at the replica named in the payload (an
	// sshAsk) for a node's agent to dial back; the replica holding that
	// agent's stream asks it to.
	topicSSH = "tide_ssh"
)

// replication runs this replica's part of a multi-replica control plane:
// it campaigns for leadership (the leader runs the controller), publishes
// local changes to the other replicas and applies theirs.
type replication struct {
	s       *Server
	cluster store.Cluster
	leading atomic.Bool

	// self names this process in its topicChanges messages.
	self string

	mu      sync.Mutex
	changed bool
	nodes   map[string]bool
	kick    chan struct{}
}

func newReplication(s *Server, c store.Cluster) *replication {
	return &replication{s: s, cluster: c, self: rand.Text(), nodes: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// run blocks until ctx ends.
func (r *replication) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.cluster.Listen(ctx, []string{topicChanges, topicAgents, topicSSH}, r.receive) })
	wg.Go(func() { r.publish(ctx) })
	_ = r.cluster.Lead(ctx, r.s.cfg.Replica, func(lead context.Context) {
		r.leading.Store(true)
		defer r.leading.Store(false)
		_ = r.s.ctrl.Run(lead)
	})
	wg.Wait()
}

// changedLocally records a local change for the other replicas.
func (r *replication) changedLocally() {
	r.mu.Lock()
	r.changed = true
	r.mu.Unlock()
	r.wake()
}

// sshAsk is a client waiting at Replica (its agent URL) for node's agent to
// dial back for SSH connection ID. It carries no credentials: the replica
// holding the stream reads them from the store.
type sshAsk struct {
	Workspace string `json:"workspace"`
	Compute   string `json:"compute"`
	Node      string `json:"node"`
	ID        string `json:"id"`
	Replica   string `json:"replica"`
}

// askSSH asks the other replicas to have node's agent dial this one back.
func (r *replication) askSSH(ctx context.Context, a sshAsk) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return r.cluster.Publish(ctx, topicSSH, string(b))
}

// relay asks the replica holding node's stream to send it what is pending.
func (r *replication) relay(node string) {
	r.mu.Lock()
	r.nodes[node] = true
	r.mu.Unlock()
	r.wake()
}

func (r *replication) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// publish sends what accumulated, one NOTIFY at a time: under load many
// changes share one message.
func (r *replication) publish(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		r.mu.Lock()
		changed, nodes := r.changed, r.nodes
		r.changed, r.nodes = false, map[string]bool{}
		r.mu.Unlock()
		if changed {
			if err := r.cluster.Publish(ctx, topicChanges, r.self); err != nil && ctx.Err() == nil {
				r.s.log.Debug("publishing a change to the other replicas", "err", err)
			}
		}
		for n := range nodes {
			if err := r.cluster.Publish(ctx, topicAgents, n); err != nil && ctx.Err() == nil {
				r.s.log.Debug("relaying to the replica of an agent", "node", n, "err", err)
			}
		}
	}
}

// receive applies another replica's message (or this one's own echo). An
// empty topic follows a reconnection, after which anything may have been
// missed: wake everything.
func (r *replication) receive(topic, payload string) {
	switch topic {
	case topicAgents:
		r.s.hub.Deliver(payload, controller.Message{Kind: controller.KindSync})
	case topicSSH:
		var a sshAsk
		// This replica's own asks are kept where they are made.
		if json.Unmarshal([]byte(payload), &a) == nil && a.Replica != r.s.cfg.AdvertiseURL {
			go r.s.askAgentSSH(a)
		}
	case topicChanges:
		if payload == r.self {
			return
		}
		r.s.changes.Notify()
		if r.leading.Load() {
			r.s.ctrl.Notify()
		}
	default:
		r.s.changes.Notify()
		r.s.ctrl.Notify()
		r.s.svc.Recheck("")
		r.s.hub.DeliverAll(controller.Message{Kind: controller.KindSync})
	}
}
