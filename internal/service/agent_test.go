package service

import (
	"fmt"
	"testing"
)

// The rendezvous port must stay below Linux's ephemeral range (32768 and
// up): an outgoing connection on node 0 could otherwise take it before the
// launcher binds, and the job fails with "address already in use".
func TestMasterPortBelowEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for i := range 20000 {
		p := MasterPort(fmt.Sprintf("job-%d/attempt-%d", i, i%3))
		if p < 29500 || p >= 32768 {
			t.Fatalf("MasterPort = %d, want 29500 <= port < 32768", p)
		}
		seen[p] = true
	}
	if len(seen) < 2900 {
		t.Errorf("20000 ids gave %d distinct ports; want them spread over the range", len(seen))
	}
}
