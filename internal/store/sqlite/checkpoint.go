package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// Checkpoints run off the writer. SQLite copies the write-ahead log back
// into the database file (a checkpoint) by default inside the commit that
// takes the log past 1,000 pages: that commit, and every write queued
// behind the one writer connection, waited for the copy and its two
// fsyncs, 4 to 21 ms on the benchmark's machine. On a warm idle node that
// was the tail of submit to first output line: a job's submission and its
// first log line are commits. The writer's automatic checkpoints are off
// (wal_autocheckpoint(0)); a connection of its own checkpoints (PASSIVE:
// it neither waits for nor holds up readers and the writer) at most every
// checkpointEvery while there are commits. Durability is the same: in WAL
// mode with synchronous NORMAL a commit is durable against a crash of the
// process once written to the log, whoever checkpoints it later.

// checkpointEvery is the shortest time between two checkpoints, which
// bounds the log at the pages one interval writes.
var checkpointEvery = time.Second // a variable for tests

// checkpointer runs the checkpoints of one store.
type checkpointer struct {
	db   *sql.DB // one connection
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	db.SetMaxOpenConns(1)
	c := &checkpointer{db: db, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

// committed says a commit added to the log. It never blocks.
func (c *checkpointer) committed() {
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
		var busy, frames, copied int
		if err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
			c.log.Warn("checkpointing the sqlite log", slog.Any("err", err))
		}
		select {
		case <-c.stop:
			return
		case <-time.After(checkpointEvery):
		}
	}
}

// close stops the checkpoints and closes the connection (the writer's
// close, the last, checkpoints what is left).
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
