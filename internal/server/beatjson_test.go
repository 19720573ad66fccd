package server

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tideml/tide/api"
)

// agentLikeBeats are heartbeats as agents send them: encoding/json's
// output for what the agent's heartbeatLoop and simagent fill in.
func agentLikeBeats() []api.AgentHeartbeat {
	gpu := 37.5
	return []api.AgentHeartbeat{
		{NodeID: "n-1"},
		{NodeID: "n-1", Utilization: &api.NodeUtilization{CPUPercent: 1.5, MemoryBytes: 40 << 20}, Cache: &api.NodeCache{LimitBytes: 10 << 30}},
		{NodeID: "gpu-2", Running: []string{"default/train-7/2", "ws/x/1"}, Refused: []string{"ws/y/3"},
			Usage: map[string]api.JobUsage{
				"default/train-7/2": {CPUSeconds: 12.345678, MemoryBytes: 1 << 30, PeakMemoryBytes: 3 << 30, GPUPercent: &gpu, GPUMemoryBytes: 8 << 30, DiskBytes: 4096, Samples: 12},
				"ws/x/1":            {Note: "a container's processes are not measured", CPUSeconds: 1e-7},
			},
			Utilization: &api.NodeUtilization{CPUPercent: 387.00000001, MemoryBytes: 5 << 30, GPUPercent: &gpu, GPUMemoryBytes: 8 << 30},
			Cache:       &api.NodeCache{Hits: 3, Misses: 2, Evictions: 1, Entries: 4, Bytes: 1 << 20, LimitBytes: 10 << 30}},
	}
}

// What agents send is read without json.Unmarshal, and read as it
// would read it.
func TestAgentBeatsDecodeWithoutReflection(t *testing.T) {
	for _, want := range agentLikeBeats() {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got api.AgentHeartbeat
		d := beatScan{b: b}
		if !d.heartbeat(&got) {
			t.Fatalf("%s: left to json.Unmarshal, want read field by field", b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: read as %+v, want %+v", b, got, want)
		}
	}
}

// decodeBeat gives what json.Unmarshal gives, error or not, whatever the
// input.
func FuzzDecodeBeat(f *testing.F) {
	for _, hb := range agentLikeBeats() {
		b, _ := json.Marshal(hb)
		f.Add(b)
	}
	for _, s := range []string{
		`{"node_id": "n"}`, ` { "running" : [ ] , "usage":{} } `, `{"utilization":{}}`, `null`, `{"NODE_ID":"x"}`,
		`{"node_id":"a","node_id":"b"}`, `{"running":["a\u0041"]}`, `{"cache":{"entries":1.0}}`, `{"cache":{"hits":1e3}}`,
		`{"utilization":{"cpu_percent":1e400}}`, `{"utilization":{"cpu_percent":-0.0}}`, `{"usage":{"a":{"samples":9223372036854775808}}}`,
		`{"running":null}`, `{"activity":{"kernels":1}}`, `{"node_id":"x"} x`, `{"node_id":"é"}`, `{"cache":{"bytes":01}}`,
		`{"usage":{"a":{},"a":{"note":"n"}}}`, `{"utilization":{"gpu_percent":5,"gpu_percent":6}}`, `{"refused":["a",]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got api.AgentHeartbeat
		werr := json.Unmarshal(b, &want)
		gerr := decodeBeat(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: decodeBeat's error %v, json.Unmarshal's %v", b, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeBeat read %+v, json.Unmarshal %+v", b, got, want)
		}
	})
}
