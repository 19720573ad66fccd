package autoscaler

import (
	"testing"
	"time"
)

// TestBackoffDoublesToItsBound: each round of failures doubles the wait
// from 1 s up to 256 s and stays there however many rounds fail; failures
// inside a round add no wait; a node created after the last failure
// clears it.
func TestBackoffDoublesToItsBound(t *testing.T) {
	var b Backoff
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	want := time.Second
	for round := 1; round <= 70; round++ {
		if d := b.Fail(now, "no capacity"); d != want {
			t.Fatalf("round %d waits %s, want %s", round, d, want)
		}
		if d := b.Fail(now.Add(want/2), "no capacity"); d != want-want/2 || b.Failures != round {
			t.Fatalf("a second failure in round %d: waits %s, %d rounds; want %s, %d", round, d, b.Failures, want-want/2, round)
		}
		now = b.Until
		want = min(2*want, MaxBackoff)
	}
	if b.Blocks(now) || !b.RecoveredBy(now) || b.RecoveredBy(b.At) {
		t.Fatalf("at the end of the wait: blocks %v; a node created then recovers %v, one created at the last failure %v",
			b.Blocks(now), b.RecoveredBy(now), b.RecoveredBy(b.At))
	}
}
