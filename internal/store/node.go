package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tideml/tide/api"
)

// NodeBeat is what a node's heartbeats change. It is kept apart from the
// node's record so that a heartbeat writes a few columns instead of the
// whole record, and is no change for the controller's node feed.
type NodeBeat struct {
	LastHeartbeat time.Time            `json:"last_heartbeat,omitzero"`
	Utilization   *api.NodeUtilization `json:"utilization,omitempty"`
	JobUsage      *api.JobUsage        `json:"job_usage,omitempty"`
	Cache         *api.NodeCache       `json:"cache,omitempty"`
}

// ComputeUtilization is what the nodes of a compute used at their last
// written heartbeat (Tx.ComputeUtilizations).
type ComputeUtilization struct {
	CPUPercent  float64 // summed over the nodes
	MemoryBytes int64   // summed over the nodes
	// GPUPercent is the mean over the nodes that measured one; nil:
	// none did.
	GPUPercent *float64
}

// ScanComputeUtilizations reads both stores' answer to
// Tx.ComputeUtilizations: workspace, compute, the summed CPU and memory,
// and the mean GPU (NULL: none).
func ScanComputeUtilizations(rows Rows) (map[[2]string]ComputeUtilization, error) {
	out := map[[2]string]ComputeUtilization{}
	for rows.Next() {
		var k [2]string
		var u ComputeUtilization
		if err := rows.Scan(&k[0], &k[1], &u.CPUPercent, &u.MemoryBytes, &u.GPUPercent); err != nil {
			return nil, fmt.Errorf("summing the nodes' utilization: %w", err)
		}
		out[k] = u
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("summing the nodes' utilization: %w", err)
	}
	return out, nil
}

// NodeJobBeat is a node's job and heartbeat fields (Tx.NodeBeats).
type NodeJobBeat struct {
	Job  string
	Beat NodeBeat
}

// MissingNode is the ErrNotFound a store's PutNodeBeats returns when it
// wrote fewer nodes than beats holds: it names the first that tx does
// not hold.
func MissingNode(ctx context.Context, tx Tx, beats map[string]NodeBeat) error {
	ids := slices.Sorted(maps.Keys(beats))
	held, err := tx.NodeBeats(ctx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := held[id]; !ok {
			return NotFound("node", id)
		}
	}
	return fmt.Errorf("recording the heartbeats of %d nodes: fewer written than held", len(ids))
}

// BeatOf returns n's heartbeat fields.
func BeatOf(n *api.Node) NodeBeat {
	return NodeBeat{LastHeartbeat: n.LastHeartbeat.UTC(), Utilization: n.Utilization, JobUsage: n.JobUsage, Cache: n.Cache}
}

// Apply sets n's heartbeat fields to b's.
func (b NodeBeat) Apply(n *api.Node) {
	n.LastHeartbeat, n.Utilization, n.JobUsage, n.Cache = b.LastHeartbeat, b.Utilization, b.JobUsage, b.Cache
}

// NodeSeen is when a node last sent a heartbeat.
type NodeSeen struct {
	ID       string
	LastSeen time.Time
}

// EncodeNode is how both stores keep a node: its record without the
// heartbeat fields (doc), those fields (beat), and its last heartbeat in
// Unix nanoseconds (0 when it never sent one), the column liveness reads.
func EncodeNode(n *api.Node) (doc, beat []byte, lastSeen int64, err error) {
	c := *n
	c.CreatedOn, c.StateSince, c.LastHeartbeat = c.CreatedOn.UTC(), c.StateSince.UTC(), c.LastHeartbeat.UTC()
	b := BeatOf(&c)
	NodeBeat{}.Apply(&c)
	if doc, err = json.Marshal(c); err != nil {
		return nil, nil, 0, fmt.Errorf("encoding node %s: %w", n.ID, err)
	}
	if beat, lastSeen, err = EncodeBeat(b); err != nil {
		return nil, nil, 0, fmt.Errorf("encoding node %s: %w", n.ID, err)
	}
	return doc, beat, lastSeen, nil
}

// EncodeBeat is b as both stores keep it, and its time for the last_seen
// column.
func EncodeBeat(b NodeBeat) ([]byte, int64, error) {
	b.LastHeartbeat = b.LastHeartbeat.UTC()
	j, err := json.Marshal(b)
	if err != nil || b.LastHeartbeat.IsZero() {
		return j, 0, err
	}
	return j, b.LastHeartbeat.UnixNano(), nil
}

// SeenAt is the time of a last_seen column (EncodeBeat's).
func SeenAt(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// DecodeNode reads a node that EncodeNode wrote; beat is empty for a
// record written before heartbeats had their own column, whose doc holds
// them.
func DecodeNode(doc, beat []byte) (api.Node, error) {
	var n api.Node
	if err := json.Unmarshal(doc, &n); err != nil {
		return n, err
	}
	if len(beat) == 0 {
		return n, nil
	}
	var b NodeBeat
	if err := json.Unmarshal(beat, &b); err != nil {
		return n, err
	}
	b.Apply(&n)
	return n, nil
}
