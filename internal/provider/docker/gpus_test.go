package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/dockerengine/dockertest"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/docker"
	"github.com/tideml/tide/internal/provider/providertest"
)

// TestNodeContainersGetDisjointGPUs: node containers on one host get
// disjoint GPUs from the location's list (recorded in a label the provider
// reads back); too few free is insufficient capacity. (This host has no
// NVIDIA runtime, so no device request is made: the choice is what is
// tested; gpuRequests in internal/agent/runtime turns it into DeviceIDs.)
func TestNodeContainersGetDisjointGPUs(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.NodeImage(t, engine, tideBin)
	dir := t.TempDir()
	p, err := docker.New(docker.Config{Engine: engine, Image: image, AgentBinary: tideBin, DataDir: dir, GracePeriod: 2 * time.Second,
		GPUs: []string{"0", "1", "2", "3"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		nodes, _ := p.List(ctx)
		for _, n := range nodes {
			_ = p.Delete(ctx, n.ID)
		}
	})
	size := api.Size{Name: "Standard_NC12s_v3", VCPUs: 1, MemoryGB: 1, GPUs: 2}
	for _, id := range []string{"gpu-a", "gpu-b"} {
		req := providertest.Request(id)
		req.Size = size
		if _, err := p.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	req := providertest.Request("gpu-c")
	req.Size = size
	_, err = p.Create(ctx, req)
	if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "0 of the host's 4 are free") {
		t.Fatalf("a third 2-GPU container on a 4-GPU host: %v; want insufficient capacity", err)
	}
	if err := p.Delete(ctx, "gpu-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatalf("after gpu-a went: %v", err)
	}
}
