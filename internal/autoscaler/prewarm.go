package autoscaler

import (
	"cmp"
	"slices"
	"time"
)

// Pre-warming: jobs that come at the same minute every day (a nightly
// batch, a pipeline's schedule) are predictable, and nodes booted a boot
// time ahead of them save their wait.
const (
	slotsPerDay = 24 * 60 // one-minute slots
	// profileDays is how many past days the profile keeps, and
	// recurDays how many of them must each have had demand in a minute
	// for it to be pre-warmed: a pattern seen three days running.
	profileDays = 7
	recurDays   = 3
)

// profile counts the nodes demanded per minute of the day (UTC) over the
// last profileDays days, and predicts, per minute, the nodes demanded in
// it on every one of those days (at least recurDays of them): what comes
// every day, not what came once.
type profile struct {
	Counts [profileDays]map[int]int `json:"counts,omitempty"` // row by day mod profileDays: minute → nodes
	Day    [profileDays]int64       `json:"days"`             // the day (Unix days) each row holds
	First  int64                    `json:"first"`            // the first day demand was seen, + 1 (0: none)
	// pred is the prediction for the current day (the latest row's day),
	// and next[m] the first minute at or after m whose prediction is
	// positive (slotsPerDay: none); recomputed when a day begins.
	pred [slotsPerDay]int
	next [slotsPerDay + 1]int
}

func unixDay(ns int64) int64 { return ns / int64(24*time.Hour) }

func minuteOf(ns int64) int { return int(ns % int64(24*time.Hour) / int64(time.Minute)) }

// add records nodes demanded at ns.
func (p *profile) add(ns int64, nodes int) {
	if ns < 0 {
		return
	}
	d := unixDay(ns)
	if p.First == 0 {
		p.First = d + 1
	}
	row := int(d % profileDays)
	if p.Day[row] != d || p.Counts[row] == nil {
		p.Day[row], p.Counts[row] = d, map[int]int{}
		p.predict(d)
	}
	p.Counts[row][minuteOf(ns)] += nodes
}

// predict computes, for day d, each minute's nodes demanded on every one
// of the past days kept (the least of them), when at least recurDays
// past days are known.
func (p *profile) predict(d int64) {
	p.pred = [slotsPerDay]int{}
	for m, n := range p.forecast(d) {
		p.pred[m] = n
	}
	p.next[slotsPerDay] = slotsPerDay
	for m := slotsPerDay - 1; m >= 0; m-- {
		p.next[m] = p.next[m+1]
		if p.pred[m] > 0 {
			p.next[m] = m
		}
	}
}

// forecast returns the prediction for day d: per minute, the least nodes
// demanded on every one of the days before d that the profile holds, when
// at least recurDays of them are known, each had demand, and chance would
// not make minutes recur so: on a busy compute (a job every few minutes)
// tens of minutes a day have had jobs on each of the last three days by
// chance, and pre-warming them replays as a gain on the very days they
// were drawn from. So the days' shares of minutes with demand, multiplied,
// must expect fewer than one such minute a day. nil otherwise.
func (p *profile) forecast(d int64) map[int]int {
	var past []map[int]int
	for k := int64(1); k <= profileDays; k++ {
		e := d - k
		if p.First == 0 || e < p.First-1 {
			break
		}
		row := int(e % profileDays)
		if p.Day[row] > e {
			break // the row holds a later day now: e is no longer kept
		}
		if p.Day[row] != e {
			return nil // a day without demand
		}
		past = append(past, p.Counts[row])
	}
	if len(past) < recurDays {
		return nil
	}
	chance := float64(slotsPerDay)
	for _, c := range past {
		chance *= float64(len(c)) / slotsPerDay
	}
	if chance >= 1 {
		return nil
	}
	out := map[int]int{}
	for m, n := range past[0] {
		least := n
		for _, c := range past[1:] {
			least = min(least, c[m])
		}
		if least > 0 {
			out[m] = least
		}
	}
	return out
}

// ahead returns the nodes predicted for the minutes from now's to a boot
// time after now, and the next time after now at which a minute with
// predicted demand is a boot time away (zero when none is predicted
// today).
func (p *profile) ahead(now time.Time, boot time.Duration) (nodes int, wake time.Time) {
	from, to := now.UnixNano(), now.Add(boot).UnixNano()
	if from < 0 {
		return 0, time.Time{}
	}
	m := minuteOf(from)
	span := int((to - from + int64(time.Minute) - 1) / int64(time.Minute))
	for k := 0; k <= span && k < slotsPerDay; k++ {
		nodes += p.pred[(m+k)%slotsPerDay]
	}
	last := minuteOf(to)
	if last+1 < slotsPerDay {
		if n := p.next[last+1]; n < slotsPerDay {
			start := to - to%int64(time.Minute) + int64(n-last)*int64(time.Minute)
			wake = time.Unix(0, start).Add(-boot)
		}
	}
	return nodes, wake
}

// bootsAhead returns log with, at the start of every minute it spans whose
// demand the profile predicts, the predicted nodes booted ahead (a
// negative logEvent), so a replay can price pre-warming; log itself when
// nothing is predicted in its span.
func (p *profile) bootsAhead(log []logEvent, boot time.Duration) []logEvent {
	if len(log) == 0 || p.next[0] == slotsPerDay {
		return log
	}
	var out []logEvent
	day := int64(24 * time.Hour)
	first, last := log[0].At, log[len(log)-1].At
	for d := first - first%day; d <= last; d += day {
		for m := p.next[0]; m < slotsPerDay; m = p.next[m+1] {
			if at := d + int64(m)*int64(time.Minute); at >= first && at <= last {
				out = append(out, logEvent{At: at, Nodes: -p.pred[m]})
			}
		}
	}
	if len(out) == 0 {
		return log
	}
	out = append(out, log...)
	slices.SortStableFunc(out, func(a, b logEvent) int { return cmp.Compare(a.At, b.At) })
	return out
}
