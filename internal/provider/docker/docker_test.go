package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/dockerengine"
	"github.com/tideml/tide/internal/dockerengine/dockertest"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/docker"
	"github.com/tideml/tide/internal/provider/providertest"
	"github.com/tideml/tide/internal/tidetest"
)

var tideBin string

// TestMain builds the tide binary the node containers mount.
func TestMain(m *testing.M) { tidetest.Main(m, "../../../cmd/tide", &tideBin) }

func newProvider(t *testing.T, engine *dockerengine.Client, image, dataDir string) *docker.Provider {
	t.Helper()
	p, err := docker.New(docker.Config{Engine: engine, Image: image, AgentBinary: tideBin, DataDir: dataDir, GracePeriod: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.NodeImage(t, engine, tideBin)
	providertest.Run(t, func(t *testing.T) func() provider.Provider {
		dir := t.TempDir()
		t.Cleanup(func() {
			p := newProvider(t, engine, image, dir)
			nodes, _ := p.List(context.Background())
			for _, n := range nodes {
				_ = p.Delete(context.Background(), n.ID)
			}
		})
		return func() provider.Provider { return newProvider(t, engine, image, dir) }
	})
}

func TestNodeContainer(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.NodeImage(t, engine, tideBin)
	p := newProvider(t, engine, image, t.TempDir())
	ctx := t.Context()

	t.Run("unknown network", func(t *testing.T) {
		req := providertest.Request("node-net")
		req.Network = "tide-test-no-such-network"
		_, err := p.Create(ctx, req)
		if err == nil || !strings.Contains(err.Error(), `network_settings.vnet_name "tide-test-no-such-network"`) {
			t.Fatalf("Create = %v; want the unknown network named", err)
		}
		if _, err := p.Get(ctx, req.ID); !provider.IsNotFound(err) {
			t.Fatalf("Get after a failed Create = %v; want NotFound (nothing left)", err)
		}
	})

	t.Run("limits and agent", func(t *testing.T) {
		req := providertest.Request("node-lim")
		req.Size.VCPUs, req.Size.MemoryGB = 1, 0.5
		n, err := p.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Delete(context.Background(), req.ID)
		c, err := engine.InspectContainer(ctx, strings.TrimPrefix(n.ProviderID, "container:"))
		if err != nil {
			t.Fatal(err)
		}
		if c.HostConfig.Memory != 512<<20 || c.HostConfig.NanoCPUs != 1e9 {
			t.Errorf("container limits: memory %d, nano CPUs %d; want 512 MiB and 1 CPU", c.HostConfig.Memory, c.HostConfig.NanoCPUs)
		}
		// The agent runs (it retries the unreachable server) rather than
		// failing on a missing library or binary.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			got, err := p.Get(ctx, req.ID)
			if err != nil || got.State == provider.StateExited {
				t.Fatalf("node: %+v, %v", got, err)
			}
			<-time.After(100 * time.Millisecond)
		}
	})
}

// TestAgentFailureIsExplained: a node whose agent exits (here: a runtime
// that needs a Docker engine inside the node) is reported exited with the
// agent's last words.
func TestAgentFailureIsExplained(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.NodeImage(t, engine, tideBin)
	p := newProvider(t, engine, image, t.TempDir())
	req := providertest.Request("node-fail")
	req.Runtime = "docker"
	if _, err := p.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	defer p.Delete(context.Background(), req.ID)
	var n *provider.Node
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if n, err = p.Get(t.Context(), req.ID); err != nil {
			t.Fatal(err)
		}
		if n.State == provider.StateExited || time.Now().After(deadline) {
			break
		}
		<-time.After(50 * time.Millisecond)
	}
	if n.State != provider.StateExited || !strings.Contains(n.Reason, "no Docker engine answers") {
		t.Fatalf("node %s: %q; want exited with the agent's error", n.State, n.Reason)
	}
}
