package autoscaler

import "time"

// maxDoublings is how often the back-off doubles: the ninth round of
// failures and every later one wait MaxBackoff.
const maxDoublings = 8

// MaxBackoff bounds the provisioning back-off (256 s).
const MaxBackoff = time.Second << maxDoublings

// Backoff is a compute's provisioning back-off: after a failed node
// creation no node is created until Until, so that a failing backend is not
// hammered in a create/delete loop. Each round of failures doubles the
// delay (1 s, 2 s, 4 s ... up to MaxBackoff). The controller keeps one per
// compute and `tide simulate` one for its compute, so that a replayed
// capacity outage backs off exactly as the server does.
type Backoff struct {
	Failures int       // rounds of failures since the backend last worked
	Until    time.Time // no creation before then
	Last     string    // the last failure, for pending reasons
	At       time.Time // when it happened
}

// Fail records a failed node creation at now and returns how long
// creations now wait. A failure while a back-off runs belongs to the round
// that started it: nothing is created during a back-off, so that creation
// was launched with the ones that already failed (the nodes of one
// scale-up fail together when capacity is unavailable), and counting each
// would grow one round's delay to minutes.
func (b *Backoff) Fail(now time.Time, msg string) time.Duration {
	if !b.Blocks(now) {
		b.Failures++
		b.Until = now.Add(time.Second << min(b.Failures-1, maxDoublings))
	}
	b.Last, b.At = msg, now
	return b.Until.Sub(now)
}

// Blocks reports whether node creations wait at now.
func (b Backoff) Blocks(now time.Time) bool { return now.Before(b.Until) }

// RecoveredBy reports whether a node created at createdOn that came up
// (registered) shows the backend works again: it was created after the
// last failure. The back-off is then forgotten.
func (b Backoff) RecoveredBy(createdOn time.Time) bool { return createdOn.After(b.At) }
