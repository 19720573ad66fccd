package spec_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TestShownResourcesCanBeSentBack: a job or compute as the server returns
// it, with every status field set, parses again once StripStatus removed
// what the server sets; the same fields in a file are refused as
// read-only (not as unknown).
func TestShownResourcesCanBeSentBack(t *testing.T) {
	code := 0
	now := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	job := api.Job{Name: "j1", Type: api.JobTypeCommand, Command: "echo hi", Compute: "cpu",
		Workspace: "default", Status: api.JobCompleted, CreatedOn: now, StartTime: now, EndTime: now, ExitCode: &code,
		Etag: "7", Attempt: 1, CreatedBy: "alice", LogTail: []string{"hi"},
		Cost:  &api.Cost{NodeHours: 0.5, Amount: 0.1, Currency: "USD", PricePerHour: 0.2},
		Usage: &api.JobUsage{CPUSeconds: 3}}
	compute := api.Compute{Name: "cpu", Type: "amlcompute", Size: "Standard_DS3_v2", MaxInstances: 2,
		Workspace: "default", ProvisioningState: "Succeeded", CurrentNodeCount: 1, Etag: "3",
		Cost: &api.Cost{NodeHours: 1, Amount: 0.2, Currency: "USD"}}
	for _, tc := range []struct {
		kind  string
		doc   any
		parse func([]byte) error
	}{
		{spec.KindJob, job, func(b []byte) error { _, err := spec.ParseJob("job.json", b, nil); return err }},
		{spec.KindCompute, compute, func(b []byte) error { _, err := spec.ParseCompute("compute.json", b, nil); return err }},
	} {
		shown, err := json.Marshal(tc.doc)
		if err != nil {
			t.Fatal(err)
		}
		err = tc.parse(shown)
		if err == nil || !strings.Contains(err.Error(), "read-only") || strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s as shown, in a file: %v; want read-only errors only", tc.kind, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(shown, &doc); err != nil {
			t.Fatal(err)
		}
		if !spec.StripStatus(tc.kind, doc) {
			t.Errorf("%s: StripStatus found no status field", tc.kind)
		}
		sent, _ := json.Marshal(doc)
		if err := tc.parse(sent); err != nil {
			t.Errorf("%s sent back after StripStatus: %v", tc.kind, err)
		}
	}
}
