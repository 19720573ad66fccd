package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"
	"time"
)

// Checkpoints run beside the writer. SQLite copies its write-ahead log
// into the database file (a checkpoint) by default inside the commit that
// takes the log past 1,000 pages: that commit, and every write queued
// behind the one writer connection, waits for the copy and its two
// fsyncs (4 to 20 ms measured on the benchmark's machine, on about one job
// in ten of submit to first output line: the submission and the first log
// line are commits). A connection of the store's own runs a PASSIVE
// checkpoint (which neither waits for nor holds up the writer and the
// readers) once the writer has been idle for checkpointIdle after a
// commit, at most every checkpointEvery, so the log is copied before it
// reaches the writer's threshold whenever writes pause for a moment, and
// the next write starts the log over.
//
// The writer keeps its automatic checkpoints, which bound the log. While a
// background checkpoint runs (its fsyncs took up to hundreds of ms under
// load) the writer's own find the checkpoint lock taken and are skipped,
// so the log grows by what is written meanwhile (to 36 MB after 3,000
// steady commits when it ran beside them); hence the background checkpoint
// waits for a pause in the writes, and under writes that never pause the
// writer's checkpoints do the work as before
// (TestLogBoundedUnderSteadyWrites). Durability is the same: with WAL and
// synchronous NORMAL a commit survives a crash of tide once it is in the
// log, whichever connection checkpoints it later.

// checkpointEvery is the shortest time between two background
// checkpoints: one copy and two fsyncs a second at most. The log the writer
// would checkpoint (1,000 pages, 4 MB) takes some 20 no-op jobs: at more
// than 20 jobs a second the writer may still checkpoint some of it.
var checkpointEvery = time.Second // a variable for tests

// checkpointIdle is how long the writer must have committed nothing
// before a background checkpoint runs.
const checkpointIdle = 2 * time.Millisecond

// checkpointer runs the background checkpoints of one store.
type checkpointer struct {
	db   *sql.DB // one connection
	log  *slog.Logger
	kick chan struct{}
	// last is when the last commit ended (UnixNano).
	last atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	c := &checkpointer{db: db, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

// committed says a commit added to the log. It never blocks.
func (c *checkpointer) committed() {
	c.last.Store(time.Now().UnixNano())
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		// Wait for a pause in the writes.
		for {
			idle := time.Since(time.Unix(0, c.last.Load()))
			if idle >= checkpointIdle {
				break
			}
			select {
			case <-c.stop:
				return
			case <-time.After(checkpointIdle - idle):
			}
		}
		if _, err := c.db.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
			c.log.Warn("checkpointing the sqlite log", slog.Any("err", err))
		}
		select {
		case <-c.stop:
			return
		case <-time.After(checkpointEvery):
		}
	}
}

// close stops the checkpoints and closes their connection (the writer's
// close, the last, checkpoints what is left).
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
