package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// An agent's assignment stream is served on a connection taken over from
// net/http (agentstream.go): it still answers as server-sent events, is
// pushed what the controller decides, and is let go as soon as the agent
// hangs up, not at the next keep-alive 20 s later, so that the node's
// next stream (or another replica) is the one pushed to.
func TestAgentStreamEndsWithItsConnection(t *testing.T) {
	in, node, token := startSimNode(t)
	post := nodePost(in, token)
	if err := post("/v1/agent/register", `{"capacity": {"vcpus": 4, "memory_gb": 14}}`); err != nil {
		t.Fatal(err)
	}
	beating, stopBeats := context.WithCancel(context.Background())
	defer stopBeats()
	go func() {
		for beating.Err() == nil {
			_ = post("/v1/agent/heartbeat", "{}")
			time.Sleep(200 * time.Millisecond)
		}
	}()
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", in.cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/agent/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", token)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %s %q", resp.Status, resp.Header.Get("Content-Type"))
		}
		return c, r
	}
	c, r := open()
	waitFor(t, "the stream held", 10*time.Second, func() bool { return in.srv.AgentConnected(node) })
	// An assignment is pushed on it as an event.
	j := submit(t, in, "command: 'true'\ncompute: sim\n")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var event, data string
	for event != "assign" {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (want the assignment of %s)", err, j.Name)
		}
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok && event == "assign" {
			data = v
		}
	}
	if data == "" {
		line, _ := r.ReadString('\n')
		data, _ = strings.CutPrefix(line, "data: ")
	}
	if !strings.Contains(data, j.Name) {
		t.Fatalf("assign event %q: not job %s's", data, j.Name)
	}
	// Hanging up lets the stream go at once.
	c.Close()
	waitFor(t, "the stream let go after its agent hung up", 5*time.Second, func() bool { return !in.srv.AgentConnected(node) })
	// A new stream is held again.
	c2, _ := open()
	defer c2.Close()
	waitFor(t, "the second stream held", 10*time.Second, func() bool { return in.srv.AgentConnected(node) })
	if _, err := in.client.CancelJob(context.Background(), "default", j.Name); err != nil && !api.IsNotFound(err) {
		t.Fatal(err)
	}
}

// startSimNode starts a server with one node of a compute "sim" in a fake
// provider's location, whose agent the test plays with the node's token.
func startSimNode(t *testing.T) (in *instance, node, token string) {
	return startSimNodeWith(t, "")
}

// startSimNodeWith is startSimNode with more of the compute's YAML.
func startSimNodeWith(t *testing.T, more string) (in *instance, node, token string) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	in = startWith(t, t.TempDir(), "", "", func(c *config.Server) {
		c.Locations = append(c.Locations, config.Location{Name: "sim", Provider: "fake", Settings: map[string]any{"token_dir": tokens}})
	})
	t.Cleanup(func() { cleanup(t, in) })
	createCompute(t, in, "name: sim\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: sim\nmin_instances: 1\nmax_instances: 1\n"+more)
	waitFor(t, "the sim node's token", 30*time.Second, func() bool {
		es, _ := os.ReadDir(tokens)
		for _, e := range es {
			if !strings.HasPrefix(e.Name(), ".") {
				node = e.Name()
			}
		}
		return node != ""
	})
	return in, node, in.srv.NodeToken(node)
}

// nodePost returns a function that posts a JSON body as the node whose
// token is token.
func nodePost(in *instance, token string) func(path, body string) error {
	return func(path, body string) error {
		req, _ := http.NewRequest("POST", "http://"+in.cfg.Listen+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
}
