package ssh_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/providertest"
)

// TestHostsGiveDisjointGPUs: nodes on one host get disjoint GPUs from the
// host's list, recorded in node.json so a new provider sees who holds
// what; a host with too few free is skipped; when none has enough the node
// waits (insufficient capacity), and a size no host can ever hold fails
// with the reason. (The lab's hosts have no GPUs: the lists are
// configured, as for hosts whose drivers the server cannot see; the agent
// turns a node's devices into CUDA_VISIBLE_DEVICES, tested in
// internal/agent/runtime.)
func TestHostsGiveDisjointGPUs(t *testing.T) {
	l := requireLab(t)
	ctx := t.Context()
	settings := l.settings(t.TempDir(), 3, "")
	hosts := settings["hosts"].([]any)
	hosts[0].(map[string]any)["gpus"] = []any{0, 1, 2, 3}
	hosts[1].(map[string]any)["gpus"] = []any{"0", "1"}
	t.Cleanup(func() { deleteAll(t, settings) })
	p := open(t, settings)

	create := func(id string, gpus int) (*provider.Node, error) {
		req := providertest.Request(id)
		req.Size = api.Size{Name: "Standard_NC12s_v3", VCPUs: 1, MemoryGB: 1, GPUs: gpus}
		return p.Create(ctx, req)
	}
	got := map[string]string{} // node -> host/devices
	for _, id := range []string{"g-a", "g-b", "g-c"} {
		n, err := create(id, 2)
		if err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		got[id] = strings.Split(n.ProviderID, "/pid/")[0] + " " + strings.Join(n.Capacity.GPUDevices, ",")
	}
	h0, h1 := "ssh://root@"+l.Hosts[0].IP+":22", "ssh://root@"+l.Hosts[1].IP+":22"
	want := map[string]string{"g-a": h0 + " 0,1", "g-b": h0 + " 2,3", "g-c": h1 + " 0,1"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s placed on %q; want %q", id, got[id], w)
		}
	}

	// Every GPU is held: a 2-GPU node waits, though both hosts have slots.
	if _, err := create("g-d", 2); !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "0 of the host's 4 are free") {
		t.Errorf("a 2-GPU node with every GPU held: %v; want insufficient capacity naming the free GPUs", err)
	}
	// No host has 8: that never fits, and says so.
	if _, err := create("g-e", 8); err == nil || provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "needs 8 GPUs but the host has 4") {
		t.Errorf("an 8-GPU node on hosts of 4 and 2: %v; want a lasting error naming the host's GPUs", err)
	}
	// A node without GPUs still fits beside them.
	if n, err := create("g-cpu", 0); err != nil || len(n.Capacity.GPUDevices) != 0 {
		t.Errorf("a CPU node: %v, devices %v; want placed with none", err, n)
	}

	// A new provider (a server restart) reads who holds what from the
	// hosts: after g-b goes, its two GPUs are the ones given out.
	p = open(t, settings)
	nodes, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.ID == "g-a" && !slices.Equal(n.Capacity.GPUDevices, []string{"0", "1"}) {
			t.Errorf("g-a listed with devices %v; want [0 1] from node.json", n.Capacity.GPUDevices)
		}
	}
	if err := p.Delete(ctx, "g-b"); err != nil {
		t.Fatal(err)
	}
	if n, err := create("g-f", 2); err != nil || !slices.Equal(n.Capacity.GPUDevices, []string{"2", "3"}) {
		t.Errorf("after g-b went: %v, %+v; want g-b's devices 2,3", err, n)
	}

	// "auto" asks the host; the lab's hosts have none, so a GPU size gets
	// no devices there (it runs with what the host has, as before).
	auto := l.settings(t.TempDir(), 1, "")
	auto["hosts"] = auto["hosts"].([]any)[:1]
	auto["hosts"].([]any)[0].(map[string]any)["gpus"] = "auto"
	t.Cleanup(func() { deleteAll(t, auto) })
	pa := open(t, auto)
	req := providertest.Request("g-auto")
	req.Size = api.Size{Name: "Standard_NC6", VCPUs: 1, MemoryGB: 1, GPUs: 1}
	if n, err := pa.Create(ctx, req); err != nil || len(n.Capacity.GPUDevices) != 0 {
		t.Errorf("a GPU node on a host that detects none: %v, %+v; want placed without devices", err, n)
	}
}
