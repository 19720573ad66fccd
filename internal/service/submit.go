package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tideml/tide/internal/store"
)

// Submissions that arrive together are written in one transaction (group
// commit), as heartbeats are (heartbeat.go): SQLite has one writer, and
// at 1,000 submissions a second each beginning and committing its own
// transaction kept the writer busy and every other writer waiting. Agents'
// status reports join the same batches (ReportStatus): at 10,000 nodes,
// beginning and committing each report's transaction was two fifths of
// what a report cost while submissions started jobs. Each
// submission runs in its own savepoint (store.Tx.Savepoint), so one
// refused (a bad compute, a full queue, a taken name) leaves the others
// of its batch untouched and gets its own error; and each is answered only
// once the transaction holding it has committed. There is no added wait:
// a batch is written as soon as the writer is free, so an idle server
// writes each submission alone, at once.

const (
	// submitBatchMax bounds how many submissions one transaction holds,
	// so that one batch's wait stays short under a burst.
	submitBatchMax = 128
	// submitWriteTimeout bounds one batch's transaction.
	submitWriteTimeout = 30 * time.Second
)

// submissions collects the submissions waiting for the writer.
type submissions struct {
	mu      sync.Mutex
	next    []*submission // in arrival order
	writing bool          // a goroutine is writing batches
}

// submission is one request's writes, to run in a batch's transaction.
type submission struct {
	ctx  context.Context // the request's: its values (who submits)
	fn   func(ctx context.Context, tx store.Tx) error
	then func()        // once fn's writes committed (nil: nothing)
	err  error         // fn's, or the transaction's
	done chan struct{} // closed once written (or failed)
}

// inWriteBatch runs fn in a write transaction shared with the
// submissions (and status reports) that arrive meanwhile, and returns once that transaction
// has committed (nil) or fn's writes were undone (fn's error, or the
// transaction's). fn may run more than once, as in store.Store.Update.
// then, if not nil, runs once fn's writes have committed, on the
// goroutine that wrote them, before inWriteBatch returns: what fn's
// writes allow (an assignment's push) need not wait for the request's
// goroutine to run again.
func (s *Service) inWriteBatch(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error, then func()) error {
	g := &s.submits
	m := &submission{ctx: ctx, fn: fn, then: then, done: make(chan struct{})}
	g.mu.Lock()
	g.next = append(g.next, m)
	if !g.writing {
		g.writing = true
		go s.writeSubmissions()
	}
	g.mu.Unlock()
	select {
	case <-m.done:
		return m.err
	case <-ctx.Done():
		// Not written if its batch has not begun (writeSubmitBatch
		// skips it); it may still commit if its batch had, as a request
		// whose client left after the commit did before.
		return ctx.Err()
	}
}

// writeSubmissions writes the waiting submissions, up to submitBatchMax a
// transaction, until none is left.
func (s *Service) writeSubmissions() {
	g := &s.submits
	for {
		g.mu.Lock()
		n := min(len(g.next), submitBatchMax)
		if n == 0 {
			g.next, g.writing = nil, false
			g.mu.Unlock()
			return
		}
		batch := g.next[:n:n]
		g.next = g.next[n:]
		g.mu.Unlock()
		s.writeSubmitBatch(batch)
	}
}

// writeSubmitBatch writes one batch. A submission's error rolls back its
// savepoint only and is its own: a refusal, a conflict, a value the store
// rejects, a bug. Only an error that breaks the transaction (the store
// unreachable, a conflict PostgreSQL retries whole, the batch's deadline)
// is the batch's, and every submission of it gets that error, which names
// no submission.
func (s *Service) writeSubmitBatch(batch []*submission) {
	ctx, cancel := context.WithTimeout(context.Background(), submitWriteTimeout)
	defer cancel()
	committed := false
	// A submission alone in its transaction takes no savepoint: its error
	// rolls the transaction back, which undoes what the savepoint would
	// have (two statements fewer; an idle server writes each alone).
	alone := len(batch) == 1
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		committed = false
		for _, m := range batch {
			if err := m.ctx.Err(); err != nil {
				// Its client gave up while it waited for the writer,
				// and was answered so: writing it now would leave a
				// job its client does not know of, and a retry of an
				// unnamed job would make a second one.
				m.err = err
				continue
			}
			mctx := requestValues{Context: ctx, values: m.ctx}
			if alone {
				if m.err = runSubmission(mctx, tx, m.fn); m.err != nil {
					return m.err
				}
				committed = true
				continue
			}
			m.err = tx.Savepoint(ctx, func() error { return runSubmission(mctx, tx, m.fn) })
			if m.err == nil {
				committed = true
			} else if batchError(ctx, m.err) {
				return m.err
			}
		}
		return nil
	})
	if alone && err != nil && batch[0].err != nil && errors.Is(err, batch[0].err) {
		// The one submission's own error, which rolled its transaction
		// back: it keeps it.
		err = nil
	}
	if err != nil {
		if s.Log != nil {
			s.Log.Warn("a batch of submissions and status reports was not written", "writes", len(batch), "err", err)
		}
		if ownError(err) || ctx.Err() != nil {
			// One of the submissions' own errors (of any workspace)
			// failed the batch with it: every submission gets one
			// error naming none of them. Nothing was written; retry.
			err = fmt.Errorf("%w: this request was written together with %d other submissions or status reports and the store could not write them (see the server's log); nothing was written, retry", store.ErrUnavailable, len(batch)-1)
		}
		// Else the store's own error (a full disk, a broken
		// transaction, the database unreachable) names no submission,
		// and says what to do.
	}
	for _, m := range batch {
		if err != nil {
			m.err = err
		}
		if m.err == nil && m.then != nil {
			m.then()
		}
		close(m.done)
	}
	if err == nil && committed {
		s.notify()
	}
}

// runSubmission runs fn, turning a panic into that submission's error: a
// bug in one submission must neither take the server down nor fail the
// others of its batch, as it would not have when it ran in its own request.
func runSubmission(ctx context.Context, tx store.Tx, fn func(context.Context, store.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("submission panicked: %v", p)
		}
	}()
	return fn(ctx, tx)
}

// ownError reports whether err is, or wraps, an error of one submission:
// a refusal to its user or a conflict on its resources.
func ownError(err error) bool {
	var e *Error
	return errors.As(err, &e) || errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists)
}

// batchError reports whether err, returned by one submission's savepoint,
// is the whole transaction's: the savepoint could not undo the
// submission, the store is unreachable, PostgreSQL must retry the
// transaction, or the batch's own deadline passed. Any other error was
// undone with the submission's savepoint and concerns it alone.
func batchError(ctx context.Context, err error) bool {
	return errors.Is(err, store.ErrTxBroken) || errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil
}

// requestValues is a batch's context (its deadline, its cancellation)
// with one request's values (who submits), so that a client leaving does
// not cut the transaction its batch shares.
type requestValues struct {
	context.Context
	values context.Context
}

// Value implements context.Context.
func (c requestValues) Value(key any) any { return c.values.Value(key) }
