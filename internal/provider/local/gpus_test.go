package local_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/local"
)

// TestGPUsAreDisjoint: nodes sharing the host get disjoint GPUs from the
// location's list; a size that finds too few free waits (insufficient
// capacity) until a node holding GPUs goes; one that needs more than the
// host has fails with the reason.
func TestGPUsAreDisjoint(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler()) // agents retry; only node.json matters here
	defer srv.Close()
	dir := t.TempDir()
	cleanup(t, dir)
	p2, err := local.New(local.Config{AgentCommand: []string{os.Args[0], "agent"}, DataDir: dir, Env: []string{"TIDE_TEST_AGENT=1"},
		GPUs: []string{"0", "1", "2", "3"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	size := api.Size{Name: "Standard_NC12s_v3", VCPUs: 12, MemoryGB: 224, GPUs: 2}
	create := func(id string, sz api.Size) error {
		_, err := p2.Create(ctx, provider.NodeRequest{ID: id, Workspace: "w", Compute: "c", Location: "gpu", Size: sz, ServerURL: srv.URL, Token: "t"})
		return err
	}
	devices := func(id string) []string {
		b, err := os.ReadFile(filepath.Join(dir, "nodes", id, "node.json"))
		if err != nil {
			t.Fatal(err)
		}
		var nf struct {
			Capacity api.Capacity `json:"capacity"`
		}
		if err := json.Unmarshal(b, &nf); err != nil {
			t.Fatal(err)
		}
		return nf.Capacity.GPUDevices
	}
	if err := create("n1", size); err != nil {
		t.Fatal(err)
	}
	if err := create("n2", size); err != nil {
		t.Fatal(err)
	}
	a, b := devices("n1"), devices("n2")
	if len(a) != 2 || len(b) != 2 || slices.ContainsFunc(a, func(d string) bool { return slices.Contains(b, d) }) {
		t.Fatalf("n1 has %v, n2 has %v: want two disjoint pairs", a, b)
	}
	err = create("n3", size)
	if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "0 of the host's 4 are free") {
		t.Fatalf("a third 2-GPU node on a 4-GPU host: %v; want insufficient capacity", err)
	}
	if err := p2.Delete(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := create("n3", size); err != nil {
		t.Fatalf("after n1 went: %v", err)
	}
	if got := devices("n3"); !slices.Equal(got, a) {
		t.Errorf("n3 has %v, want n1's freed %v", got, a)
	}
	err = create("n4", api.Size{Name: "Standard_ND96asr_v4", GPUs: 8})
	if err == nil || provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "needs 8 GPUs but this location's host has 4") {
		t.Errorf("an 8-GPU size on a 4-GPU host: %v; want a plain error with the reason", err)
	}
	if _, err := local.Factory("gpu", map[string]any{"gpus": []any{0, 0}}, provider.Deps{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a device listed twice: %v", err)
	}
	if _, err := local.Factory("gpu", map[string]any{"gpus": []any{"x"}}, provider.Deps{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "not a device index") {
		t.Errorf("a device that is not an index: %v", err)
	}
}
