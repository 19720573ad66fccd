package controller

import (
	"context"
	"log/slog"
	"runtime/metrics"
	"time"
)

// turnTrace times the phases of one turn, for the debug log: the turn
// histogram says how long turns take, the trace which phase a slow one
// spent its time in, and whether a garbage collection ran meanwhile.
type turnTrace struct {
	began, last time.Time
	gc          uint64
	attrs       []slog.Attr
}

// gcCycles reads the number of garbage collections the process has
// completed.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// newTrace starts a turn's trace, nil when the log does not print debug
// records (the trace then costs nothing).
func (c *Controller) newTrace(ctx context.Context) *turnTrace {
	if !c.log.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	now := time.Now()
	return &turnTrace{began: now, last: now, gc: gcCycles()}
}

// phase ends the phase called name.
func (t *turnTrace) phase(name string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.attrs = append(t.attrs, slog.Duration(name, now.Sub(t.last)))
	t.last = now
}

// done logs the turn's phases.
func (c *Controller) traceDone(ctx context.Context, t *turnTrace) {
	if t == nil {
		return
	}
	attrs := append(t.attrs, slog.Duration("total", time.Since(t.began)), slog.Uint64("gc", gcCycles()-t.gc))
	c.log.LogAttrs(ctx, slog.LevelDebug, "controller turn", attrs...)
}
