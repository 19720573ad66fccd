package spec

import (
	"strings"
	"testing"
)

func TestDistributionBounds(t *testing.T) {
	tests := []struct{ yml, err string }{
		{"distribution: {type: pytorch, process_count_per_instance: 257}", "distribution.process_count_per_instance: must be at most 256"},
		{"distribution: {type: tensorflow, worker_count: 600}\nresources: {instance_count: 2}", "600 workers and parameter servers on 2 node(s) exceed 256"},
		{"distribution: {type: pytorch, process_count_per_instance: 8}\nresources: {instance_count: 2}", ""},
	}
	for _, tt := range tests {
		_, err := ParseJob("job.yml", []byte("command: x\n"+tt.yml+"\n"), nil)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.yml, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: err = %v, want %q", tt.yml, err, tt.err)
		}
	}
}
