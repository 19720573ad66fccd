package simulate

import (
	"cmp"
	"slices"
	"time"
)

// Clairvoyant returns the node-hours of a provider that knows the future:
// every job starts the moment it is submitted (no wait), on the node that
// went idle most recently when there is one, else on a node booted exactly
// in time; a node is kept idle only when it is reused within the boot time
// (else booting a new one later is cheaper). Keeping the most recently
// freed node is optimal for that cost because min(gap, boot) is concave,
// so no policy that starts every job at once uses fewer node-hours; it is
// the reference for the policies' idle and booting hours.
func Clairvoyant(trace *Trace, boot time.Duration) NodeHours {
	type ev struct {
		at    time.Duration
		nodes int
		free  bool
	}
	evs := make([]ev, 0, 2*len(trace.Jobs))
	var busy nodeTime
	for _, j := range trace.Jobs {
		n := max(j.Instances, 1)
		evs = append(evs, ev{j.Submit, n, false}, ev{j.Submit + j.Duration, n, true})
		busy.addN(j.Duration, n)
	}
	// At equal times nodes free up before jobs start, so a node can be
	// handed straight on.
	slices.SortStableFunc(evs, func(a, b ev) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case a.free && !b.free:
			return -1
		case b.free && !a.free:
			return 1
		}
		return 0
	})
	var idle, booting nodeTime
	var stack []time.Duration // when each idle node went idle
	for _, e := range evs {
		if e.free {
			for range e.nodes {
				stack = append(stack, e.at)
			}
			continue
		}
		for range e.nodes {
			if len(stack) == 0 {
				booting.add(boot)
				continue
			}
			gap := e.at - stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if gap <= boot {
				idle.add(gap)
			} else {
				booting.add(boot)
			}
		}
	}
	h := NodeHours{Busy: busy.hours(), Idle: idle.hours(), Booting: booting.hours()}
	h.Total = h.Busy + h.Idle + h.Booting
	return h
}
