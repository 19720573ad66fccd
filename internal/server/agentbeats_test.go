package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// An agent that opens its stream with POST sends its heartbeats on it
// (agentbeats.go). Each is answered on the stream, in order; they keep the
// node alive past unusable_after as heartbeat requests do, and show as
// its last heartbeat; the answer carries what the store says the agent
// must stop; a line that is no heartbeat is refused, and the next one is
// still answered. Once the stream and its heartbeats stop, the node is
// found silent and made unusable.
func TestHeartbeatsOnTheStream(t *testing.T) {
	in, node, token := startSimNode(t)
	if err := nodePost(in, token)("/v1/agent/register", `{"capacity": {"vcpus": 4, "memory_gb": 14}}`); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", in.cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/agent/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", token)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	// beat sends one line as a chunk of the request's body and returns
	// the event that answers it.
	beat := func(line string) (event, data string) {
		t.Helper()
		fmt.Fprintf(c, "%x\r\n%s\n\r\n", len(line)+1, line)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the answer to heartbeat %s: %v", line, err)
			}
			l = strings.TrimRight(l, "\n")
			if v, ok := strings.CutPrefix(l, "event: "); ok {
				event = v
			}
			if v, ok := strings.CutPrefix(l, "data: "); ok {
				data = v
			}
			if l == "" && (event == "beat" || event == "beat_error") {
				return event, data
			}
			if l == "" {
				event, data = "", ""
			}
		}
	}
	nodeOf := func() api.Node {
		t.Helper()
		ns, err := in.client.Nodes(context.Background(), "default", "sim")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.ID == node {
				return n
			}
		}
		t.Fatalf("node %s is not listed", node)
		return api.Node{}
	}

	sent := time.Now().Truncate(time.Millisecond)
	if ev, data := beat(`{"node_id": "` + node + `"}`); ev != "beat" || data != "{}" {
		t.Fatalf("answer to a heartbeat: event %q data %q, want beat {}", ev, data)
	}
	if n := nodeOf(); n.LastHeartbeat.Before(sent) {
		t.Fatalf("node's last heartbeat %s: before the heartbeat sent on the stream at %s", n.LastHeartbeat, sent)
	}
	// Heartbeats on the stream alone keep the node for longer than
	// unusable_after.
	for end := time.Now().Add(in.cfg.UnusableAfter + 2*time.Second); time.Now().Before(end); time.Sleep(in.cfg.HeartbeatInterval) {
		if ev, _ := beat(`{"node_id": "` + node + `"}`); ev != "beat" {
			t.Fatalf("answer to a heartbeat: %s", ev)
		}
	}
	if n := nodeOf(); n.State != api.NodeIdle {
		t.Fatalf("node heartbeating on its stream for %s: %s (%s), want idle", in.cfg.UnusableAfter+2*time.Second, n.State, n.Error)
	}
	// What the agent runs and the store does not place on the node.
	if ev, data := beat(`{"node_id": "` + node + `", "running": ["default/gone/1"]}`); ev != "beat" || !strings.Contains(data, `"cancel":["default/gone/1"]`) {
		t.Fatalf("answer to a heartbeat running an unknown assignment: %s %s, want a beat that cancels it", ev, data)
	}
	if ev, data := beat(`not a heartbeat`); ev != "beat_error" || !strings.Contains(data, `"status":400`) {
		t.Fatalf("answer to a line that is no heartbeat: %s %s, want beat_error 400", ev, data)
	}
	if ev, _ := beat(`{"node_id": "` + node + `"}`); ev != "beat" {
		t.Fatalf("answer to the heartbeat after a bad line: %s", ev)
	}

	// The agent goes: its stream and heartbeats stop.
	c.Close()
	waitFor(t, "the silent node made unusable", 30*time.Second, func() bool {
		es, err := in.client.ComputeEvents(context.Background(), "default", "sim")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Kind == "NodeUnusable" && strings.Contains(e.Message, node) && strings.Contains(e.Message, "stopped heartbeating") {
				return true
			}
		}
		return false
	})
}
