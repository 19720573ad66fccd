package runtime

import (
	"context"
	"fmt"

	"github.com/tideml/tide/internal/dockerengine"
)

// Runtime names, as a location's `runtime` setting and the agent's
// --runtime flag spell them.
const (
	ProcessName = "process"
	DockerName  = "docker"
	SandboxName = "sandbox"
)

// Names lists the runtimes New knows.
func Names() []string { return []string{ProcessName, DockerName, SandboxName} }

// Options configure the runtime New builds.
type Options struct {
	// Limits are the node's size.
	Limits Limits
	// NodeID labels the node's containers.
	NodeID string
	// NodeDir is the node's folder; it tells this node's containers from
	// those of another node with the same id (another server's).
	NodeDir string
	// Network is the compute's network_settings.vnet_name: the docker
	// runtime's container network (it must exist); "none" isolates jobs
	// from the network on the docker and sandbox runtimes.
	Network string
	// RunAs runs the process runtime's jobs as this Unix user (a name or
	// uid); empty runs them as DefaultJobUser when the agent is root and
	// as the agent's user otherwise; SameAsAgent as the agent's user.
	RunAs string
}

// New builds the runtime called name. The docker runtime needs an engine
// that answers now: a node that cannot run its jobs should fail at start,
// where the provider reports it, not job by job.
func New(ctx context.Context, name string, opts Options) (Runtime, error) {
	switch name {
	case "", ProcessName:
		u, err := JobUser(opts.RunAs)
		if err != nil {
			return nil, err
		}
		return Process{User: u}, nil
	case DockerName:
		engine := dockerengine.New("")
		if err := engine.Ping(ctx); err != nil {
			return nil, fmt.Errorf("runtime docker: no Docker engine answers at %s (%v); start dockerd or configure the location with runtime: process", engine.Socket(), err)
		}
		if opts.Network != "" {
			if ok, err := engine.NetworkExists(ctx, opts.Network); err != nil {
				return nil, fmt.Errorf("runtime docker: checking network %s: %w", opts.Network, err)
			} else if !ok {
				return nil, fmt.Errorf("network_settings.vnet_name %q: no Docker network of that name; create it with 'docker network create %s' or remove vnet_name", opts.Network, opts.Network)
			}
		}
		labels := map[string]string{"tide.node": opts.NodeID, "tide.node-dir": opts.NodeDir}
		d := &Docker{Engine: engine, Limits: opts.Limits, Labels: labels, Network: opts.Network}
		// Containers of this node that exist before its agent started were
		// left by an earlier run of the agent (a crash); that run's jobs are
		// reported failed by the agent's recovery, so nothing follows them.
		if opts.NodeDir != "" {
			left, err := engine.ListContainers(ctx, labels)
			if err != nil {
				return nil, fmt.Errorf("runtime docker: listing containers left by an earlier agent: %w", err)
			}
			for _, c := range left {
				if err := engine.RemoveContainer(ctx, c.ID); err != nil && !dockerengine.IsNotFound(err) {
					return nil, fmt.Errorf("runtime docker: removing container %s left by an earlier agent: %w", c.ID[:12], err)
				}
			}
		}
		return d, nil
	case SandboxName:
		return &Sandbox{Limits: opts.Limits, IsolateNetwork: opts.Network == "none"}, nil
	}
	return nil, fmt.Errorf("runtime %q: unknown; known: %v", name, Names())
}
