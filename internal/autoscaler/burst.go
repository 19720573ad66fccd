package autoscaler

import (
	"slices"
	"time"
)

// Booting ahead within a burst: jobs that come in a burst (a batch
// submitted within a minute, a pipeline's fan-out) each find no idle node
// and each wait a whole boot, the last ones booted last. A burst starts
// with a submit that comes after a boot time without any; the history
// shows how many more nodes the bursts asked for within a boot time of
// their first job (the follow-on), and a candidate with burst B boots B
// nodes more at a burst's first submit, so the jobs that follow within the
// boot time wait only for what is left of it. Whether that pays is the
// replay's to judge, like every candidate: where bursts are rare or small
// it is never chosen. (Fixed idle times buy wait on bursty traces at a
// poor rate: on the bursty-batch training traces fixed 120 s kept every
// node that finished for 120 s and caught a few jobs a week.)

// burstQuantiles are the shares of the logged bursts whose follow-on the
// candidates' B covers entirely: B is the follow-on that many of them
// reached at least.
var burstQuantiles = [...]float64{0.75, 0.5, 0.25}

// followOns returns the follow-on of every burst in log: the nodes asked
// for within a boot time after a burst's first submit (not counting it).
func followOns(log []logEvent, boot time.Duration) []int {
	var out []int
	last, start := int64(0), int64(0)
	open := false
	n := 0
	for i, e := range log {
		if e.Nodes <= 0 {
			continue
		}
		if open && e.At-start < int64(boot) {
			n += e.Nodes
		} else if open {
			out = append(out, n)
			open = false
		}
		if !open && i > 0 && e.At-last >= int64(boot) {
			open, start, n = true, e.At, 0
		}
		last = e.At
	}
	return out
}

// burstSizes returns the candidates' burst sizes for log: the follow-ons
// that burstQuantiles of the bursts reached, positive and distinct.
func burstSizes(log []logEvent, boot time.Duration) []int {
	f := followOns(log, boot)
	if len(f) < parts {
		return nil // too few bursts to learn their size from
	}
	slices.Sort(f)
	var out []int
	for _, q := range burstQuantiles {
		if b := f[int((1-q)*float64(len(f)-1))]; b > 0 && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// burstLeft returns, when a burst that began less than a boot time before
// now is open, how many of the b nodes booted ahead for it the jobs after
// its first have not asked for yet, and when it closes (0 when none is
// open). Only the submits of the last boot time are read.
func (h *GapHistory) burstLeft(now time.Time, b int) (int, time.Time) {
	d := h.demand[h.dhead:]
	t, boot := now.UnixNano(), int64(h.BootTime)
	e := len(d) - 1
	for e >= 0 && d[e].at > t {
		e--
	}
	// The burst's first submit: the earliest of the last boot time's
	// submits with a boot time without any before it.
	s := e
	for s > 0 && d[s].at > t-boot && d[s].at-d[s-1].at < boot {
		s--
	}
	if s < 0 || d[s].at <= t-boot || (s > 0 && d[s].at-d[s-1].at < boot) ||
		(s == 0 && h.dhead > 0 && d[0].at-h.demand[h.dhead-1].at < boot) {
		return 0, time.Time{}
	}
	return max(0, b-(d[e].cum-d[s].cum)), time.Unix(0, d[s].at+boot)
}
