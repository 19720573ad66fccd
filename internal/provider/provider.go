// Package provider defines how tide gets nodes: a Provider starts a tide
// agent somewhere (a child process, a container, a VM, a Slurm allocation)
// and stops it again. Everything else (scheduling, logs, outputs) happens
// through the agent, so providers stay small.
//
// The shape follows Karpenter's cloud provider: five methods, typed errors
// the controller can explain to users, and optional abilities as small
// extra interfaces found by type assertion (see Preempter).
//
// Every implementation passes the conformance suite in providertest.
package provider

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
)

// Provider starts and stops nodes. Implementations are safe for concurrent use.
type Provider interface {
	// Name is the provider's registry name, e.g. "local".
	Name() string
	// Create starts an agent for req and returns once the request is
	// accepted; the node registers with the server later. A request whose
	// ID already exists fails with an *AlreadyExistsError.
	Create(ctx context.Context, req NodeRequest) (*Node, error)
	// Delete stops the node's agent and frees what it holds. It is
	// idempotent: once the node is gone it returns an error wrapping
	// ErrNotFound, which callers treat as success.
	Delete(ctx context.Context, id string) error
	// Get returns the provider's view of one node, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, id string) (*Node, error)
	// List returns every node the provider holds, including ones created by
	// an earlier instance (before a server restart), so the controller can
	// reconcile: no orphans, no forgotten nodes.
	List(ctx context.Context) ([]*Node, error)
}

// Preempter is implemented by providers that can take a node away the way a
// low-priority VM is evicted (the agent gets SIGTERM and a grace period).
type Preempter interface {
	Preempt(ctx context.Context, id string) error
}

// Stopper is implemented by providers that can stop a node and keep its
// disk (on the local provider, its folder): how a compute instance stops.
// A later Create with the same ID and Keep starts the node on that disk;
// Delete frees it. A stopped node is not in List.
type Stopper interface {
	Stop(ctx context.Context, id string) error
}

// NodeRequest asks a provider for one node.
type NodeRequest struct {
	// ID is the node id chosen by the controller; it is unique and is what
	// the agent registers with.
	ID        string
	Workspace string
	Compute   string
	// Location is the tide location the node comes from.
	Location string
	// Size is the VM size; its vCPUs, memory and GPUs become the node's
	// (logical) capacity.
	Size api.Size
	// Tier is api.TierDedicated or api.TierLowPriority.
	Tier string
	// ServerURL is where the agent registers; several URLs may be given
	// separated by commas (server replicas).
	ServerURL string
	// CAFingerprint pins the CA of the server's certificate; the agent
	// refuses a server that does not chain to it ("" without TLS).
	CAFingerprint string
	// RunAs is the Unix user the node's jobs run as (the location's
	// run_as; "" for the agent's own).
	RunAs string
	// CacheGB bounds the node's cache of downloaded inputs in GiB (the
	// location's node_cache_gb; 0: the agent's default).
	CacheGB float64
	// Token is the node's bearer token. Providers must not put it on a
	// command line (other users can read argv).
	Token  string
	Labels map[string]string
	// Runtime is how the node's agent runs jobs (the location's runtime:
	// "process", "docker" or "sandbox"); empty means process.
	Runtime string
	// Network is the compute's network_settings.vnet_name, for providers
	// that attach nodes to a network (empty: the provider's default).
	Network string
	// Keep asks for the node's disk kept by Stop, if there is one (a
	// compute instance starting again).
	Keep bool
	// InstanceType is the Pod shape of a job's node on an attached
	// Kubernetes cluster (requests, limits, node selector, tolerations),
	// which the kubernetes provider uses instead of Size's figures; nil
	// elsewhere.
	InstanceType *api.InstanceType
}

// Node states, in the provider's view (the server's node state, idle or
// running, comes from the agent's registration and heartbeats).
const (
	// StateStarting: the node was requested and is booting (cloud VMs,
	// queued Slurm allocations).
	StateStarting = "starting"
	// StateRunning: the agent process (or its machine) is alive.
	StateRunning = "running"
	// StateExited: the agent is gone but the node still holds resources
	// (its folder, a stopped VM); Delete frees them. Reason says why when known.
	StateExited = "exited"
	// StatePreempted: the provider took the node away (low priority).
	StatePreempted = "preempted"
)

// Node is the provider's view of one node.
type Node struct {
	ID string
	// ProviderID is the provider's own handle (a pid, a container or VM id).
	ProviderID string
	// State is one of the State* constants.
	State     string
	Compute   string
	Workspace string
	CreatedAt time.Time
	// Reason explains State when it is not StateRunning.
	Reason   string
	Capacity api.Capacity
}

// ValidNodeID reports whether id can name a node's folder, container or
// process: letters, digits, '-', '_' and '.', at most 200 characters.
func ValidNodeID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 200 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
