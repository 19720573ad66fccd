package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/spec"
)

// TestLocalLocationKnowsItsHost: a local location's nodes all run on this
// machine, which has no GPU here and far less than 1,900 GB of memory, so
// an 8xH100 size is refused naming what the host lacks and how to accept
// it anyway; with oversubscribe: true it is accepted with a warning event
// (issue 21, defect 8).
func TestLocalLocationKnowsItsHost(t *testing.T) {
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) {
		c.Locations = append(c.Locations, config.Location{Name: "strict", Provider: "local", Runtime: "process",
			Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "gpus": []any{}}})
	})
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()
	put := func(yml string) (*api.Compute, error) {
		c, err := spec.ParseCompute("c.yml", []byte(yml), nil)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := in.client.PutCompute(ctx, "default", c)
		return out, err
	}
	_, err := put("name: h100\ntype: amlcompute\nsize: Standard_ND96isr_H100_v5\nlocation: strict\nmax_instances: 1\n")
	if api.ProblemCode(err) != api.CodeValidation {
		t.Fatalf("8xH100 on a host without GPUs: %v, want a validation error", err)
	}
	for _, want := range []string{"size Standard_ND96isr_H100_v5", "8 GPUs (the host has 0)", "1900 GB of memory", "location strict", "oversubscribe: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if _, err := in.client.Compute(ctx, "default", "h100"); api.ProblemCode(err) != api.CodeNotFound {
		t.Errorf("the refused compute exists: %v", err)
	}
	// A size that fits is accepted.
	if _, err := put("name: small\ntype: amlcompute\nsize: Standard_DS1_v2\nlocation: strict\nmax_instances: 1\n"); err != nil {
		t.Errorf("a size that fits the host: %v", err)
	}
	// The test config's local location oversubscribes: accepted, and the
	// compute's events say what the host lacks.
	if _, err := put("name: h100\ntype: amlcompute\nsize: Standard_ND96isr_H100_v5\nlocation: local\nmax_instances: 1\n"); err != nil {
		t.Fatalf("8xH100 on a location with oversubscribe: true: %v", err)
	}
	es, err := in.client.ComputeEvents(ctx, "default", "h100")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range es {
		found = found || e.Kind == "Oversubscribed" && strings.Contains(e.Message, "8 GPUs (the host has 0)")
	}
	if !found {
		t.Errorf("no Oversubscribed event: %+v", es)
	}
}
