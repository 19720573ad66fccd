// Package fake is a programmable provider for controller tests, modelled on
// Karpenter's fake cloud provider: it records calls, can be told to fail the
// next Create, and runs no agent (tests register nodes with the server
// themselves when they need to). With the token_dir setting it hands each
// node's token to a program outside the server (internal/tidetest/simagent,
// whose goroutines play the agents of the scale benchmark's 10,000 nodes and
// of the chaos suite's preemption storm) as the file token_dir/<node id>.
package fake

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
)

// Name is the fake's registry name.
const Name = "fake"

// Provider is the fake. Its fields may be set by tests at any time; they are
// read under its lock. A Provider is its own "cloud": a restarted server
// gets the same instance back, as a real cloud would keep its VMs.
type Provider struct {
	mu sync.Mutex

	// NextCreateErr, when set, is returned by the next Create, then cleared.
	NextCreateErr error
	// NextDeleteErr, when set, is returned by the next Delete, then cleared.
	NextDeleteErr error
	// MaxNodes, when > 0, makes Create fail with an
	// *InsufficientCapacityError once that many nodes exist.
	MaxNodes int
	// Now is the clock for CreatedAt. Default time.Now.
	Now func() time.Time
	// TokenDir, when set, receives each created node's token as the file
	// TokenDir/<node id> (mode 0600), removed again by Delete.
	TokenDir string

	// CreateCalls and DeleteCalls record every call, failed ones included.
	CreateCalls []provider.NodeRequest
	DeleteCalls []string

	nodes map[string]*provider.Node
	seq   int
}

var (
	_ provider.Provider  = (*Provider)(nil)
	_ provider.Preempter = (*Provider)(nil)
)

// New returns an empty fake.
func New() *Provider {
	return &Provider{nodes: map[string]*provider.Node{}}
}

// Factory builds a fake for the registry. Its one setting is token_dir
// (see Provider.TokenDir); any other is refused.
func Factory(name string, settings map[string]any, deps provider.Deps) (provider.Provider, error) {
	p := New()
	for k, v := range settings {
		if k != "token_dir" {
			return nil, fmt.Errorf("%s: not a setting of the fake provider; its one setting is token_dir", k)
		}
		dir, err := provider.SettingString(k, v)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("token_dir: %w", err)
		}
		p.TokenDir = dir
	}
	return p, nil
}

// Name returns "fake".
func (p *Provider) Name() string { return Name }

// Reset forgets every node, call and programmed error.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.NextCreateErr, p.NextDeleteErr, p.MaxNodes = nil, nil, 0
	p.CreateCalls, p.DeleteCalls = nil, nil
	p.nodes = map[string]*provider.Node{}
}

// Create records the call and adds a running node.
func (p *Provider) Create(ctx context.Context, req provider.NodeRequest) (*provider.Node, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.CreateCalls = append(p.CreateCalls, req)
	if err := p.NextCreateErr; err != nil {
		p.NextCreateErr = nil
		return nil, err
	}
	if _, ok := p.nodes[req.ID]; ok {
		return nil, &provider.AlreadyExistsError{ID: req.ID}
	}
	if p.MaxNodes > 0 && len(p.nodes) >= p.MaxNodes {
		return nil, &provider.InsufficientCapacityError{Size: req.Size.Name, Location: req.Location,
			Reason: fmt.Sprintf("the fake holds at most %d nodes", p.MaxNodes)}
	}
	if p.TokenDir != "" {
		// Written whole under another name, then renamed: a reader never
		// sees half a token.
		tmp := filepath.Join(p.TokenDir, "."+req.ID)
		if err := os.WriteFile(tmp, []byte(req.Token), 0o600); err != nil {
			return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
		}
		if err := os.Rename(tmp, filepath.Join(p.TokenDir, req.ID)); err != nil {
			return nil, fmt.Errorf("creating node %s: %w", req.ID, err)
		}
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	p.seq++
	n := &provider.Node{
		ID: req.ID, ProviderID: fmt.Sprintf("fake-%d", p.seq), State: provider.StateRunning,
		Compute: req.Compute, Workspace: req.Workspace, CreatedAt: now(),
		Capacity: api.Capacity{VCPUs: req.Size.VCPUs, MemoryGB: req.Size.MemoryGB, GPUs: req.Size.GPUs},
	}
	p.nodes[req.ID] = n
	c := *n
	return &c, nil
}

// Delete records the call and removes the node.
func (p *Provider) Delete(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.DeleteCalls = append(p.DeleteCalls, id)
	if err := p.NextDeleteErr; err != nil {
		p.NextDeleteErr = nil
		return err
	}
	if _, ok := p.nodes[id]; !ok {
		return &provider.NotFoundError{ID: id}
	}
	delete(p.nodes, id)
	if p.TokenDir != "" {
		if err := os.Remove(filepath.Join(p.TokenDir, id)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("deleting node %s: %w", id, err)
		}
	}
	return nil
}

// Get returns a copy of the node.
func (p *Provider) Get(ctx context.Context, id string) (*provider.Node, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.nodes[id]
	if !ok {
		return nil, &provider.NotFoundError{ID: id}
	}
	c := *n
	return &c, nil
}

// List returns copies of every node, ordered by id.
func (p *Provider) List(ctx context.Context) ([]*provider.Node, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*provider.Node, 0, len(p.nodes))
	for _, id := range slices.Sorted(maps.Keys(p.nodes)) {
		c := *p.nodes[id]
		out = append(out, &c)
	}
	return out, nil
}

// Preempt marks the node preempted, as a cloud evicting a low-priority VM.
func (p *Provider) Preempt(ctx context.Context, id string) error {
	return p.SetState(id, provider.StatePreempted, "preempted by the fake")
}

// SetState changes a node's state, e.g. to play an agent that died.
func (p *Provider) SetState(id, state, reason string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.nodes[id]
	if !ok {
		return &provider.NotFoundError{ID: id}
	}
	n.State, n.Reason = state, reason
	return nil
}
