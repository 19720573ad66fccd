package server

import (
	"net"
	"testing"
	"time"
)

// A stream that wrote since the last keep-alive tick (the answers to the
// heartbeats it carries) sends no keep-alive; a silent one does, so that
// no stream is silent for longer than two ticks (40 s, against the
// agent's 60 s idle timeout).
func TestKeepAliveOnlyOnSilentStreams(t *testing.T) {
	c, agent := net.Pipe()
	defer c.Close()
	defer agent.Close()
	got := make(chan string, 4)
	go func() {
		b := make([]byte, 256)
		for {
			n, err := agent.Read(b)
			if err != nil {
				return
			}
			got <- string(b[:n])
		}
	}()
	out := &rawEvents{conn: c}
	if err := out.write(beatAnswered); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != string(beatAnswered) {
		t.Fatalf("stream wrote %q, want the heartbeat's answer", s)
	}
	wrote := out.wrote()
	if time.Since(wrote) > time.Second {
		t.Fatalf("wrote() = %s after a write, want now", wrote)
	}
	// The next tick, less than a period after the answer: nothing.
	if err := keepAlive(out, wrote.Add(agentKeepAlive-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		t.Fatalf("a stream that wrote %s before the tick sent %q, want nothing", agentKeepAlive-time.Millisecond, s)
	case <-time.After(100 * time.Millisecond):
	}
	// A tick a period or more after the last write: a keep-alive.
	if err := keepAlive(out, wrote.Add(agentKeepAlive)); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != string(keepAliveEvent) {
		t.Fatalf("a stream silent for %s sent %q, want a keep-alive", agentKeepAlive, s)
	}
	// A stream that never wrote (opened with GET: no heartbeats) gets
	// one at its first tick.
	if err := keepAlive(&rawEvents{conn: c}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != string(keepAliveEvent) {
		t.Fatalf("a stream that never wrote sent %q at its first tick, want a keep-alive", s)
	}
}
