package controller

import "testing"

// TestPushNeverWaitsForASlowAgent checks that an agent which stopped
// reading its stream (slow, or dead with its connection still open) does
// not hold up pushes to the others: the controller pushes during its turn,
// so a push that waited would stall the turn for every node.
func TestPushNeverWaitsForASlowAgent(t *testing.T) {
	h := NewHub()
	var relayed []string
	h.Relay = func(node string) { relayed = append(relayed, node) }
	stuck := h.Subscribe("stuck") // never read
	live := h.Subscribe("live")
	// Far more than the stream's buffer: were Push to wait, this loop
	// would never end.
	for range 10 * cap(stuck) {
		h.Push("stuck", Message{Kind: "assign"})
	}
	h.Push("live", Message{Kind: "assign", Data: "job-1"})
	if m := <-live; m.Data != "job-1" {
		t.Fatalf("live agent got %+v", m)
	}
	// What the stuck agent missed is relayed (another replica may hold
	// its newer connection) and marked: once its stream has sent what the
	// channel holds, it sends what the store holds.
	if len(stuck) != cap(stuck) || len(relayed) != 9*cap(stuck) {
		t.Errorf("stuck stream holds %d, %d pushes relayed; want %d and %d", len(stuck), len(relayed), cap(stuck), 9*cap(stuck))
	}
	if h.Missed(live) {
		t.Error("the live agent missed nothing")
	}
	if !h.Missed(stuck) || h.Missed(stuck) {
		t.Error("Missed: want true once for the stuck agent, then false")
	}
	// Once it has caught up, pushes reach it again.
	for len(stuck) > 0 {
		<-stuck
	}
	h.Push("stuck", Message{Kind: "assign"})
	if m := <-stuck; m.Kind != "assign" {
		t.Errorf("after draining: got %+v", m)
	}
	// An agent that is gone costs nothing either.
	h.Unsubscribe("stuck", stuck)
	h.Push("stuck", Message{Kind: "cancel"})
	if len(relayed) != 9*cap(stuck)+1 {
		t.Errorf("push to a gone agent not relayed")
	}
}
