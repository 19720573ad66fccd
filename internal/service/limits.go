package service

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// queueFullRetry is the Retry-After of a submission refused because its
// workspace's queue is full: jobs leave a queue at the speed nodes free,
// which the server cannot foretell; this is a polite first guess.
const queueFullRetry = 10 * time.Second

// Throttled is the 429 of a submission refused by one of the server's
// admission limits (limit names the setting, as in the config file).
func Throttled(ws, limit string, retryAfter time.Duration, format string, args ...any) *Error {
	e := errorf(429, api.CodeTooManyRequests, format, args...)
	e.Workspace, e.Limit, e.RetryAfter = ws, limit, retryAfter
	return e
}

// checkQueueRoom refuses, in tx, a submission to workspace ws that holds
// its limits.max_queued_jobs queued jobs. It reads the store's count, not
// the queue: at 100,000 queued jobs, counting them took most of each
// submission's time inside the only write transaction. The limit holds exactly under concurrent submissions: SQLite runs one
// write transaction at a time, and PostgreSQL's are serializable (one of
// two that both saw room is retried and then sees none).
func (s *Service) checkQueueRoom(ctx context.Context, tx store.Tx, ws string) error {
	limit := s.Config.Limits.For(ws).MaxQueuedJobs
	if limit <= 0 {
		return nil
	}
	n, err := tx.QueuedJobs(ctx, ws)
	if err != nil {
		return err
	}
	if n < limit {
		return nil
	}
	return Throttled(ws, "limits.max_queued_jobs", queueFullRetry,
		"workspace %s has %d queued jobs, its limit (limits.max_queued_jobs in the server config); nothing was submitted: retry in %s, once some have started or after canceling some ('tide job list --status Queued')",
		ws, n, queueFullRetry)
}
