package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"
)

// fenceLoop stops the node's jobs once no heartbeat got through for the
// fence time, half the server's unusable_after (its welcome says it). The
// server gives up on a node whose heartbeats stopped for unusable_after
// and retries its jobs elsewhere; a node cut off from the server (a
// network partition) cannot hear that, so it stops its jobs itself before
// then: a retry never runs beside the attempt it replaces. The jobs end as
// a node failure (retried under on_node_failure); the agent reports them
// once it reaches the server again.
//
// Only silence counts: a server that answers, even with an error, or whose
// host refuses the connection (the server is down, so nothing can retry
// the jobs, and a restarted server gives its agents time to come back)
// keeps the jobs running. A control plane that restarts costs no work.
func (a *agent) fenceLoop(ctx context.Context) {
	for sleepCtx(ctx, time.Duration(a.heartbeat.Load())) {
		fence := time.Duration(a.fence.Load())
		since := time.Since(time.Unix(0, a.contact.Load()))
		if fence <= 0 || since < fence {
			continue
		}
		a.mu.Lock()
		jobs := make([]*job, 0, len(a.jobs))
		for _, j := range a.jobs {
			jobs = append(jobs, j)
		}
		a.mu.Unlock()
		if len(jobs) == 0 {
			continue
		}
		reason := fmt.Sprintf("the node lost contact with the server for %s (half its unusable_after): its jobs are stopped so that their retries elsewhere cannot run beside them", since.Round(100*time.Millisecond))
		a.log.WarnContext(ctx, "stopping jobs: no contact with the server", slog.Duration("since", since), slog.Int("jobs", len(jobs)))
		for _, j := range jobs {
			// stop ignores a job already stopping; the grace fits in
			// the other half of unusable_after.
			j.stop(stopShutdown, reason, fence/2)
		}
	}
}

// answered reports whether a call to the server got an answer: nil, an
// HTTP error status, or a refused connection (the host answered that no
// server listens). Timeouts and unreachable networks are silence.
func answered(err error) bool {
	var se *statusError
	return err == nil || errors.As(err, &se) || errors.Is(err, syscall.ECONNREFUSED)
}
