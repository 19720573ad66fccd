package server

import (
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/controller"
)

// TestSSHAskOfAStreamThatEndedAfterTheNext: an agent reconnected before
// the server noticed its old stream's end. An SSH request the old stream
// held (delivered to it, never sent) goes to the new stream when the old
// one ends; it was kept for a stream that would connect next, and none
// did: the client waited 30 s (reviewer's reproduction).
func TestSSHAskOfAStreamThatEndedAfterTheNext(t *testing.T) {
	s := &Server{hub: controller.NewHub()}
	old := s.hub.Subscribe("n")
	ask := controller.Message{Kind: "ssh", Data: api.SSHOpen{ID: "x"}}
	if !s.hub.Deliver("n", ask) {
		t.Fatal("the ask was not delivered to the stream")
	}
	next := s.hub.Subscribe("n")
	s.deliverAsks("n") // nothing kept yet
	s.endStream("n", old)
	select {
	case m := <-next:
		if o, ok := m.Data.(api.SSHOpen); m.Kind != "ssh" || !ok || o.ID != "x" {
			t.Fatalf("the new stream got %+v, want the ssh ask x", m)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the ask the old stream held never reached the new one")
	}
}
