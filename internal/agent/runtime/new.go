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
}

// New builds the runtime called name. The docker runtime needs an engine
// that answers now: a node that cannot run its jobs should fail at start,
// where the provider reports it, not job by job.
func New(ctx context.Context, name string, opts Options) (Runtime, error) {
	switch name {
	case "", ProcessName:
		return Process{}, nil
	case DockerName:
		engine := dockerengine.New("")
		if err := engine.Ping(ctx); err != nil {
			return nil, fmt.Errorf("runtime docker: no Docker engine answers at %s (%v); start dockerd or configure the location with runtime: process", engine.Socket(), err)
		}
		labels := map[string]string{"tide.node": opts.NodeID, "tide.node-dir": opts.NodeDir}
		d := &Docker{Engine: engine, Limits: opts.Limits, Labels: labels}
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
		return &Sandbox{Limits: opts.Limits}, nil
	}
	return nil, fmt.Errorf("runtime %q: unknown; known: %v", name, Names())
}
