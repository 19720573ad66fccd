package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestSSHAskedBeforeTheStream: a node is idle once its agent registered,
// a moment before its assignment stream connects. An SSH request in
// between is delivered when the stream connects, and the client gets its
// connection. It used to get 503 at once on SQLite, and on PostgreSQL
// (where a replica asks the others) 504 after 30 s: a clean-clone run's
// TestSSHIntoDockerNode failed so. The agent's side is this test's: it
// registers, waits, opens the stream, and dials back as it is asked.
func TestSSHAskedBeforeTheStream(t *testing.T) {
	_, pub := writeKeyPair(t, t.TempDir(), "id_ed25519")
	in, node, token := startSimNodeWith(t, "ssh_settings:\n  admin_username: alice\n  ssh_key_value: "+pub+"\n")
	if err := nodePost(in, token)("/v1/agent/register", `{"capacity": {"vcpus": 4, "memory_gb": 14}}`); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	type result struct {
		conn net.Conn
		err  error
	}
	tunnel := make(chan result, 1)
	asked := time.Now()
	go func() {
		c, err := in.client.SSHTunnel(ctx, "default", "sim", node)
		tunnel <- result{c, err}
	}()
	time.Sleep(300 * time.Millisecond) // the request waits for the stream

	stream, err := net.Dial("tcp", in.cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	fmt.Fprintf(stream, "GET /v1/agent/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", token)
	r := bufio.NewReader(stream)
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	_ = stream.SetReadDeadline(time.Now().Add(15 * time.Second))
	var open api.SSHOpen
	for event := ""; open.ID == ""; {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no ssh event on the stream that connected after the request: %v", err)
		}
		l = strings.TrimRight(l, "\n")
		if v, ok := strings.CutPrefix(l, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(l, "data: "); ok && event == "ssh" {
			if err := json.Unmarshal([]byte(v), &open); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The dial-back, as the agent makes it; then bytes both ways.
	back, err := net.Dial("tcp", in.cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	fmt.Fprintf(back, "GET /v1/agent/ssh/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", open.ID, token, api.SSHUpgrade)
	br := bufio.NewReader(back)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("dial-back: %v %v", resp, err)
	}
	res := <-tunnel
	if res.err != nil {
		t.Fatalf("ssh requested %s before the stream connected: %v", time.Since(asked).Round(time.Millisecond), res.err)
	}
	defer res.conn.Close()
	if _, err := io.WriteString(res.conn, "SSH-2.0-client\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = back.SetReadDeadline(time.Now().Add(10 * time.Second))
	if l, err := br.ReadString('\n'); err != nil || l != "SSH-2.0-client\r\n" {
		t.Fatalf("the agent's end read %q, %v", l, err)
	}
}
