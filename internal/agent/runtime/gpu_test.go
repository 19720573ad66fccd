package runtime

import (
	"reflect"
	"testing"

	"github.com/tideml/tide/internal/dockerengine"
)

// TestGPURequests: a node with assigned devices asks Docker for exactly
// those (DeviceIDs, not a count the driver fills from the first GPUs).
func TestGPURequests(t *testing.T) {
	caps := [][]string{{"gpu"}}
	for _, tt := range []struct {
		l    Limits
		has  bool
		want []dockerengine.DeviceRequest
	}{
		{Limits{GPUs: 2, GPUDevices: []string{"2", "3"}}, true, []dockerengine.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"2", "3"}, Capabilities: caps}}},
		{Limits{GPUs: 2}, true, []dockerengine.DeviceRequest{{Driver: "nvidia", Count: 2, Capabilities: caps}}},
		{Limits{GPUs: 2, GPUDevices: []string{"0", "1"}}, false, nil},
		{Limits{}, true, nil},
	} {
		if got := gpuRequests(tt.l, tt.has); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("gpuRequests(%+v, %v) = %+v, want %+v", tt.l, tt.has, got, tt.want)
		}
	}
}
