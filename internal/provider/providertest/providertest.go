// Package providertest is the conformance suite every provider passes: the
// controller relies on these behaviours, whatever the backend.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/provider"
)

// Setup prepares fresh provider state for one subtest and returns open,
// which opens a provider instance on that state. Calling open a second time
// plays a server restart: the new instance must see the nodes the first
// one created. Cleanup (stopping what is left) is registered on t.
type Setup func(t *testing.T) (open func() provider.Provider)

// Request returns a valid NodeRequest for id, as the controller would send it.
func Request(id string) provider.NodeRequest {
	return provider.NodeRequest{
		ID:        id,
		Workspace: "ws1",
		Compute:   "cpu-cluster",
		Location:  "local",
		Size:      api.Size{Name: "Standard_DS3_v2", Family: "standardDSv2Family", VCPUs: 4, MemoryGB: 14},
		Tier:      api.TierDedicated,
		// Nothing listens here: the suite checks the node lifecycle, not
		// the agent protocol.
		ServerURL: "http://127.0.0.1:9",
		Token:     "token-" + id,
	}
}

// Run runs the conformance suite.
func Run(t *testing.T, setup Setup) {
	t.Run("CreateGetList", func(t *testing.T) {
		ctx := t.Context()
		p := setup(t)()
		if p.Name() == "" {
			t.Error("Name is empty")
		}
		req := Request("node-a")
		n, err := p.Create(ctx, req)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		checkNode(t, "Create", n, req)
		got, err := p.Get(ctx, req.ID)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		checkNode(t, "Get", got, req)
		if got.State != provider.StateRunning && got.State != provider.StateStarting {
			t.Errorf("Get: state %q, want running or starting", got.State)
		}
		list, err := p.List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if ids := ids(list); !slices.Contains(ids, req.ID) {
			t.Errorf("List = %v; want it to contain %s", ids, req.ID)
		}
	})

	t.Run("DeleteIsIdempotent", func(t *testing.T) {
		ctx := t.Context()
		p := setup(t)()
		req := Request("node-d")
		if _, err := p.Create(ctx, req); err != nil {
			t.Fatalf("Create: %v", err)
		}
		if err := p.Delete(ctx, req.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := p.Get(ctx, req.ID); !provider.IsNotFound(err) {
			t.Fatalf("Get after Delete: err = %v; want NotFound", err)
		}
		if err := p.Delete(ctx, req.ID); err != nil && !provider.IsNotFound(err) {
			t.Fatalf("second Delete: %v; want nil or NotFound", err)
		}
		list, err := p.List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if slices.Contains(ids(list), req.ID) {
			t.Errorf("List after Delete still has %s", req.ID)
		}
		if _, err := p.Get(ctx, "never-created"); !provider.IsNotFound(err) {
			t.Errorf("Get of an unknown node: err = %v; want NotFound", err)
		}
		var nf *provider.NotFoundError
		if err := p.Delete(ctx, "never-created"); err != nil && !errors.As(err, &nf) {
			t.Errorf("Delete of an unknown node: err = %v; want nil or *NotFoundError", err)
		}
	})

	t.Run("DuplicateID", func(t *testing.T) {
		ctx := t.Context()
		p := setup(t)()
		req := Request("node-dup")
		if _, err := p.Create(ctx, req); err != nil {
			t.Fatalf("Create: %v", err)
		}
		_, err := p.Create(ctx, req)
		if !provider.IsAlreadyExists(err) {
			t.Fatalf("second Create: err = %v; want *AlreadyExistsError", err)
		}
		// The first node is untouched.
		if n, err := p.Get(ctx, req.ID); err != nil || n.State == provider.StateExited {
			t.Fatalf("Get after duplicate Create: %+v, %v", n, err)
		}
	})

	t.Run("Restart", func(t *testing.T) {
		ctx := t.Context()
		open := setup(t)
		p := open()
		req := Request("node-r")
		if _, err := p.Create(ctx, req); err != nil {
			t.Fatalf("Create: %v", err)
		}
		p2 := open()
		list, err := p2.List(ctx)
		if err != nil {
			t.Fatalf("List after restart: %v", err)
		}
		if !slices.Contains(ids(list), req.ID) {
			t.Fatalf("List after restart = %v; want %s", ids(list), req.ID)
		}
		n, err := p2.Get(ctx, req.ID)
		if err != nil {
			t.Fatalf("Get after restart: %v", err)
		}
		checkNode(t, "Get after restart", n, req)
		if n.State != provider.StateRunning && n.State != provider.StateStarting {
			t.Errorf("Get after restart: state %q (%s); the node should have survived", n.State, n.Reason)
		}
		if err := p2.Delete(ctx, req.ID); err != nil {
			t.Fatalf("Delete after restart: %v", err)
		}
		if _, err := p2.Get(ctx, req.ID); !provider.IsNotFound(err) {
			t.Fatalf("Get after Delete: err = %v; want NotFound", err)
		}
	})

	t.Run("SeveralNodes", func(t *testing.T) {
		ctx := t.Context()
		p := setup(t)()
		const n = 4
		errs := make(chan error, n)
		for i := range n {
			go func() {
				_, err := p.Create(ctx, Request(fmt.Sprintf("node-%d", i)))
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("Create: %v", err)
			}
		}
		list, err := p.List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if got := ids(list); len(got) != n {
			t.Fatalf("List = %v; want %d nodes", got, n)
		}
		for i := range n {
			go func() { errs <- p.Delete(ctx, fmt.Sprintf("node-%d", i)) }()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("Delete: %v", err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			list, err := p.List(ctx)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if len(list) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("List after deleting every node = %v", ids(list))
			}
			if err := waitTick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func waitTick(ctx context.Context) error {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func checkNode(t *testing.T, op string, n *provider.Node, req provider.NodeRequest) {
	t.Helper()
	if n == nil {
		t.Fatalf("%s: nil node", op)
	}
	if n.ID != req.ID || n.Compute != req.Compute || n.Workspace != req.Workspace {
		t.Errorf("%s: node %q compute %q workspace %q; want %q %q %q", op, n.ID, n.Compute, n.Workspace, req.ID, req.Compute, req.Workspace)
	}
	if n.ProviderID == "" {
		t.Errorf("%s: empty ProviderID", op)
	}
	if n.CreatedAt.IsZero() {
		t.Errorf("%s: zero CreatedAt", op)
	}
	if n.Capacity.VCPUs != req.Size.VCPUs || n.Capacity.MemoryGB != req.Size.MemoryGB || n.Capacity.GPUs != req.Size.GPUs {
		t.Errorf("%s: capacity %+v; want the size's %d vCPUs %.0f GB %d GPUs", op, n.Capacity, req.Size.VCPUs, req.Size.MemoryGB, req.Size.GPUs)
	}
}

func ids(nodes []*provider.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.ID)
	}
	slices.Sort(out)
	return out
}

// Open builds a provider with factory from settings, with its warnings on
// stderr, or fails t.
func Open(t *testing.T, factory provider.Factory, settings map[string]any) provider.Provider {
	t.Helper()
	p, err := factory("test", settings, provider.Deps{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// DeleteAll registers a cleanup on t that deletes every node a provider
// opened by open still holds, so no agent (job, Pod) outlives the test.
func DeleteAll(t *testing.T, open func() provider.Provider) {
	t.Cleanup(func() {
		p := open()
		ctx := context.Background()
		nodes, err := p.List(ctx)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, n := range nodes {
			if err := p.Delete(ctx, n.ID); err != nil && !provider.IsNotFound(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
}

// FreePorts returns n distinct TCP ports free on 127.0.0.1, for the
// daemons a provider's tests start: ports nothing else takes before the
// daemons bind them (see freeport).
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		p, err := freeport.Get()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// AgentMain is the TestMain of a provider's tests that start real agents:
// the provider starts the test binary itself with TIDE_TEST_AGENT=1 and the
// agent's real flags, and it runs agent.Run as `tide agent` would, with
// short back-offs. Otherwise it runs setup (may be nil; it returns its
// teardown), the tests, and exits.
func AgentMain(m *testing.M, setup func() (teardown func())) {
	if os.Getenv("TIDE_TEST_AGENT") == "1" {
		os.Exit(runAgent(os.Args[2:]))
	}
	teardown := func() {}
	if setup != nil {
		teardown = setup()
	}
	code := m.Run()
	teardown()
	os.Exit(code)
}

func runAgent(args []string) int {
	flags, err := agent.ParseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := flags.Config(os.Getenv(agent.TokenEnv))
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.MinBackoff, cfg.MaxBackoff = 50*time.Millisecond, 500*time.Millisecond
	cfg.ShutdownTimeout = time.Second
	if err := agent.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
