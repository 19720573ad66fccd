package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/instance"
	"github.com/tideml/tide/internal/store"
)

// Heartbeats that arrive together are written in one transaction (group
// commit). At 10,000 nodes each heartbeat was its own write transaction:
// SQLite's one writer spent its time beginning and committing them, and a
// submission waited behind a thousand of them a second. A heartbeat that
// is written is answered only once the transaction that holds it has
// committed; most are not written at all (beatmemo.go).
// There is no added wait: a batch is written as soon as the writer is
// free, so an idle server writes each heartbeat alone, at once.

// heartbeatWriteTimeout bounds one batch's transaction; the agents whose
// heartbeats it held retry at their next beat.
const heartbeatWriteTimeout = 30 * time.Second

// beatLinger is how long a batch that holds only heartbeats written
// because their write period ran out (beatMemos.arrive) waits for others
// before it is written: at 10,000 nodes a few hundred a second are due,
// and each transaction's begin and commit cost more than its rows. A
// heartbeat that says something new is written at once, with the batch.
const beatLinger = 500 * time.Millisecond

// heartbeats collects the heartbeats waiting for the writer.
type heartbeats struct {
	mu      sync.Mutex
	next    *beatBatch // collecting; nil when none waits
	writing bool       // a goroutine is writing batches
	memo    beatMemos  // what each node's heartbeats last said (beatmemo.go)
}

// beatBatch is the heartbeats of one transaction.
type beatBatch struct {
	beats map[string]pendingBeat // by node: a later beat replaces an earlier one
	born  time.Time              // when its first heartbeat joined (monotonic)
	// urgent is closed once a heartbeat that says something new joins:
	// the batch is then written without lingering.
	urgent   chan struct{}
	isUrgent bool
	done     chan struct{}    // closed once written (or failed)
	err      error            // the transaction's
	errs     map[string]error // by node: its record is gone
	beat     map[string]Beat  // by node: what the heartbeat found
}

// pendingBeat is a heartbeat waiting for its write.
type pendingBeat struct {
	hb  api.AgentHeartbeat
	gen uint64    // its node's memo generation when it arrived
	at  time.Time // when it arrived: the last heartbeat it writes
}

// Beat is what a heartbeat found when it reconciled what the agent reports
// with what the store says.
type Beat struct {
	// Cancel lists the assignments the agent runs that the store does not
	// place on its node: the agent must stop them.
	Cancel []string
	// Missing is set when the store places an assignment on the node and
	// the agent runs nothing: it refused it or missed its push, and
	// Pending says what to send again.
	Missing bool
}

// Heartbeat records that a node's agent is alive, and what it measured,
// and reconciles the assignments it reports with the store's. A heartbeat
// that says nothing new is answered from memory (beatmemo.go).
func (s *Service) Heartbeat(ctx context.Context, nodeID string, hb api.AgentHeartbeat) (Beat, error) {
	if err := checkHeartbeat(hb); err != nil {
		return Beat{}, err
	}
	g := &s.beats
	now := s.now()
	period := BeatWritePeriod(s.Config)
	gen, write := g.memo.arrive(nodeID, hb, now, period, 2*(s.Config.UnusableAfter+period)+time.Minute)
	if write == beatAnswered {
		return Beat{}, nil
	}
	g.mu.Lock()
	b := g.next
	if b == nil {
		b = &beatBatch{beats: map[string]pendingBeat{}, born: time.Now(), urgent: make(chan struct{}), done: make(chan struct{})}
		g.next = b
	}
	b.beats[nodeID] = pendingBeat{hb: hb, gen: gen, at: now}
	if write == beatNow && !b.isUrgent {
		b.isUrgent = true
		close(b.urgent)
	}
	if !g.writing {
		g.writing = true
		go s.writeHeartbeats()
	}
	g.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return Beat{}, ctx.Err()
	}
	if b.err != nil {
		return Beat{}, b.err
	}
	return b.beat[nodeID], b.errs[nodeID]
}

// maxBeatAssignments bounds the assignments a heartbeat lists as running
// or refused: an agent runs one job at a time, and a few it is stopping.
const maxBeatAssignments = 64

// checkHeartbeat refuses a heartbeat whose lists no agent sends: too long,
// or naming an assignment that cannot be one. It would cost the batch it
// joins a read per name, or fail it.
func checkHeartbeat(hb api.AgentHeartbeat) error {
	for _, l := range [...]struct {
		field string
		ids   []string
	}{{"running", hb.Running}, {"refused", hb.Refused}} {
		field, ids := l.field, l.ids
		if len(ids) > maxBeatAssignments {
			return &Error{Status: 400, Code: api.CodeValidation, Msg: fmt.Sprintf("heartbeat: %s: %d assignments, at most %d", field, len(ids), maxBeatAssignments)}
		}
		for _, id := range ids {
			if _, _, _, err := ParseAssignmentID(id); err != nil || strings.ContainsRune(id, 0) {
				return &Error{Status: 400, Code: api.CodeValidation, Msg: fmt.Sprintf("heartbeat: %s: %q is not an assignment ID (WORKSPACE/JOB/ATTEMPT)", field, id)}
			}
		}
	}
	return nil
}

// writeHeartbeats writes the waiting batch, then the one collected
// meanwhile, until none is left.
func (s *Service) writeHeartbeats() {
	g := &s.beats
	for {
		g.mu.Lock()
		b := g.next
		if b == nil {
			g.writing = false
			g.mu.Unlock()
			return
		}
		if !b.isUrgent {
			g.mu.Unlock()
			t := time.NewTimer(time.Until(b.born.Add(beatLinger)))
			select {
			case <-b.urgent:
			case <-t.C:
			}
			t.Stop()
			g.mu.Lock()
		}
		g.next = nil
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), heartbeatWriteTimeout)
		b.err = s.Store.Update(ctx, func(tx store.Tx) error {
			b.errs, b.beat = map[string]error{}, map[string]Beat{} // PostgreSQL may run this again
			return s.writeBatch(ctx, tx, b)
		})
		cancel()
		if b.err == nil {
			for id, p := range b.beats {
				if b.errs[id] != nil {
					g.memo.forget(id)
					continue
				}
				g.memo.written(id, p.hb, p.gen, p.at, b.beat[id])
			}
		}
		close(b.done)
	}
}

// writeBatch records batch b's heartbeats in tx. Their fields are read
// and written in one statement each for the whole batch
// (store.Tx.NodeBeats, PutNodeBeats): they are the node's heartbeat
// columns alone, neither its record nor a change for the controller's
// node feed. At 10,000 nodes the heartbeats due every write period cost
// four statements each (a savepoint's two, a read and a write), a fifth
// of what heartbeats cost the server. Then what each agent runs is
// reconciled with the store (reconcileBeat), in a savepoint of its own
// where that reads anything, so that one node's error is its own, not
// the batch's (as submissions, submit.go). A heartbeat that reports
// activity (a compute instance's node, whose idle shutdown the
// controller decides from it) writes the whole record, in its savepoint.
func (s *Service) writeBatch(ctx context.Context, tx store.Tx, b *beatBatch) error {
	// In key order, so that two transactions never lock nodes in
	// opposite orders.
	ids := slices.Sorted(maps.Keys(b.beats))
	var plain []string
	for _, id := range ids {
		if b.beats[id].hb.Activity == nil {
			plain = append(plain, id)
		}
	}
	held, err := tx.NodeBeats(ctx, plain)
	if err != nil {
		return err
	}
	puts := make(map[string]store.NodeBeat, len(held))
	for _, id := range plain {
		if h, ok := held[id]; ok {
			applyBeat(&h.Beat, h.Job, b.beats[id].hb, b.beats[id].at)
			puts[id] = h.Beat
		}
	}
	if err := tx.PutNodeBeats(ctx, puts); err != nil {
		return err
	}
	for _, id := range ids {
		p := b.beats[id]
		h, ok := held[id]
		switch {
		case p.hb.Activity != nil:
			err = tx.Savepoint(ctx, func() (err error) {
				b.beat[id], err = s.activityBeat(ctx, tx, id, p.hb, p.at)
				return err
			})
		case !ok:
			err = store.NotFound("node", id)
		case agrees(h.Job, p.hb):
			continue
		default:
			err = tx.Savepoint(ctx, func() (err error) {
				b.beat[id], err = reconcileBeat(ctx, tx, id, h.Job, p.hb, p.at)
				return err
			})
		}
		switch {
		case err == nil:
		case store.IsNotFound(err):
			b.errs[id] = notFound("node", id, "the node was deleted; stop this agent")
		case errors.Is(err, store.ErrTxBroken) || errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil:
			return err
		default:
			b.errs[id] = err
		}
	}
	return nil
}

// activityBeat records in tx the heartbeat hb of a node whose agent
// reports activity: the whole record, then reconcileBeat.
func (s *Service) activityBeat(ctx context.Context, tx store.Tx, nodeID string, hb api.AgentHeartbeat, now time.Time) (Beat, error) {
	n, err := tx.GetNode(ctx, nodeID)
	if err != nil {
		return Beat{}, err
	}
	b := store.BeatOf(n)
	applyBeat(&b, n.Job, hb, now)
	b.Apply(n)
	n.Activity = hb.Activity
	if busy, _ := instance.Active(hb.Activity, n.Job); busy {
		n.ActiveAt = now
	}
	if err := tx.PutNode(ctx, n); err != nil {
		return Beat{}, err
	}
	return reconcileBeat(ctx, tx, nodeID, n.Job, hb, now)
}

// agrees reports whether a heartbeat hb of a node whose job is job leaves
// reconcileBeat nothing to read or do: the agent runs that job alone, or
// nothing while the node has none, and refused nothing.
func agrees(job string, hb api.AgentHeartbeat) bool {
	if len(hb.Refused) > 0 {
		return false
	}
	if job == "" {
		return len(hb.Running) == 0
	}
	return len(hb.Running) == 1 && hb.Running[0] == job
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

// reconcileBeat compares what the agent of a node whose job is job runs
// with the store. An assignment the agent runs other than the node's job
// is read, and stopped unless the store places it on the node; an
// assignment the agent refused is noted on its job.
func reconcileBeat(ctx context.Context, tx store.Tx, nodeID, job string, hb api.AgentHeartbeat, now time.Time) (Beat, error) {
	var beat Beat
	for _, id := range hb.Running {
		if id == job {
			continue
		}
		on, err := onNode(ctx, tx, nodeID, id)
		if err != nil {
			return beat, err
		}
		if !on {
			beat.Cancel = append(beat.Cancel, id)
		}
	}
	if job != "" && len(hb.Running) == 0 {
		ended, err := endUnstartedRank(ctx, tx, nodeID, job, now)
		if err != nil {
			return beat, err
		}
		beat.Missing = !ended
	}
	for _, id := range hb.Refused {
		ws, name, _, err := ParseAssignmentID(id)
		if err != nil || id != job {
			continue
		}
		msg := fmt.Sprintf("node %s refused assignment %s: its agent still ran %s; tide stops that and sends the assignment again", nodeID, id, strings.Join(hb.Running, ", "))
		if err := tx.AddEvent(ctx, ws, "job/"+name, &api.Event{Time: now, Kind: "AssignmentRefused", Message: msg}); err != nil {
			return beat, err
		}
	}
	return beat, nil
}

// endUnstartedRank ends the rank of job on node nodeID as canceled when
// its agent never started it (it refused the assignment while it still
// ran another) and the job is being stopped (canceled, or finalizing after
// another rank failed): resent, it would run a command the controller then
// stops, and a cancel for an assignment the agent never ran stops nothing,
// so the rank would hold its node and the job would never end. It reports
// whether it ended the rank.
func endUnstartedRank(ctx context.Context, tx store.Tx, nodeID, job string, now time.Time) (bool, error) {
	ws, name, attempt, err := ParseAssignmentID(job)
	if err != nil {
		return false, nil
	}
	j, err := tx.GetJob(ctx, ws, name)
	if store.IsNotFound(err) {
		return false, nil
	}
	if err != nil || j.Attempt != attempt || (j.Status != api.JobCancelRequested && j.Status != api.JobFinalizing) {
		return false, err
	}
	for i, r := range j.Ranks {
		if r.Node != nodeID || r.Status != "" {
			continue
		}
		j.Ranks[i].Status, j.Ranks[i].Error = api.JobCanceled, "stopped before its agent started it"
		events, err := finishRank(ctx, tx, j, i, now)
		if err != nil {
			return false, err
		}
		return true, tx.PutJob(ctx, j, "", events...)
	}
	return false, nil
}

// onNode reports whether the store places assignment id on node nodeID:
// its job's current attempt is unfinished and one of its ranks is there.
func onNode(ctx context.Context, tx store.Tx, nodeID, id string) (bool, error) {
	ws, name, attempt, err := ParseAssignmentID(id)
	if err != nil {
		return false, nil
	}
	j, err := tx.GetJob(ctx, ws, name)
	if store.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if j.Attempt != attempt || api.JobTerminal(j.Status) {
		return false, nil
	}
	for _, r := range j.Ranks {
		if r.Node == nodeID && !api.JobTerminal(r.Status) {
			return true, nil
		}
	}
	return false, nil
}
