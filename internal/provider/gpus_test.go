package provider_test

import (
	"strings"
	"testing"

	"github.com/tideml/tide/internal/provider"
)

// TestCheckListedGPUs: a configured GPU list may name only the host's
// devices when the host reports some; a host reporting none (drivers the
// server cannot see) takes the list as given.
func TestCheckListedGPUs(t *testing.T) {
	if err := provider.CheckListedGPUs([]string{"0", "1"}, nil, "this host"); err != nil {
		t.Errorf("a list on a host reporting no GPUs: %v", err)
	}
	if err := provider.CheckListedGPUs([]string{"1"}, []string{"0", "1"}, "this host"); err != nil {
		t.Errorf("a subset of the host's GPUs: %v", err)
	}
	err := provider.CheckListedGPUs([]string{"0", "5"}, []string{"0", "1"}, "host gpu1")
	if err == nil || !strings.Contains(err.Error(), "gpus: device 5 is not on host gpu1 (it has 0, 1)") {
		t.Errorf("a device the host does not have: %v", err)
	}
}
