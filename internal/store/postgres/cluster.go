package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/internal/store"
)

var _ store.Cluster = (*Store)(nil)

// leaderLock is the advisory lock whose holder runs the controller
// ("tidelead" in ASCII). pg_locks shows its high half as classid and its low
// half as objid.
const leaderLock int64 = 0x746964656c656164

// Timings of leadership. A standby tries for the lock every campaignEvery,
// so it takes over within about that long after PostgreSQL releases the
// lock of a leader whose session ended. The leader checks its session every
// checkEvery and gives up leadership when a check fails or takes longer
// than checkTimeout: a leader that cannot reach the database cannot hold
// the lock either.
const (
	campaignEvery = 500 * time.Millisecond
	checkEvery    = 500 * time.Millisecond
	checkTimeout  = 2 * time.Second
	// appPrefix marks tide's sessions in pg_stat_activity; Leader reads the
	// replica's name from it.
	appPrefix = "tide:"
)

// Lead implements store.Cluster with a session-level advisory lock held on
// a connection of its own: PostgreSQL releases it the moment that session
// ends, whether the replica exited, crashed or lost its network.
func (s *Store) Lead(ctx context.Context, replica string, fn func(ctx context.Context)) error {
	wait := campaignEvery
	for ctx.Err() == nil {
		conn, err := s.session(ctx, replica)
		if err != nil {
			s.log.Warn("campaigning for leadership: connecting to postgres", "err", err)
			sleep(ctx, wait)
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = campaignEvery
		s.campaign(ctx, conn, replica, fn)
		conn.Close(context.Background())
	}
	return ctx.Err()
}

// campaign tries for the lock on conn until it holds it, runs fn while it
// does, and returns when the session fails or ctx ends.
func (s *Store) campaign(ctx context.Context, conn *pgx.Conn, replica string, fn func(ctx context.Context)) {
	for ctx.Err() == nil {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, leaderLock).Scan(&got); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("campaigning for leadership", "err", err)
			}
			return
		}
		if got {
			break
		}
		sleep(ctx, campaignEvery)
	}
	if ctx.Err() != nil {
		return
	}
	s.log.Info("this replica leads", "replica", replica)
	lead, lost := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer lost()
		t := time.NewTicker(checkEvery)
		defer t.Stop()
		for {
			select {
			case <-lead.Done():
				return
			case <-t.C:
			}
			check, cancel := context.WithTimeout(lead, checkTimeout)
			_, err := conn.Exec(check, `SELECT 1`)
			cancel()
			if err != nil && lead.Err() == nil {
				s.log.Error("lost leadership: the session holding the lock failed", "replica", replica, "err", err)
				return
			}
		}
	}()
	fn(lead)
	lost()
	<-watched
	if ctx.Err() == nil && !conn.IsClosed() {
		// fn returned on its own: let another replica lead.
		unlock, cancel := context.WithTimeout(context.Background(), checkTimeout)
		_, _ = conn.Exec(unlock, `SELECT pg_advisory_unlock($1)`, leaderLock)
		cancel()
	}
	s.log.Info("this replica no longer leads", "replica", replica)
}

// Leader implements store.Cluster: the replica whose session holds the
// leader lock, by the application name it connected with.
func (s *Store) Leader(ctx context.Context) (string, error) {
	conn, err := s.pool.acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("connecting to postgres: %w: %w", store.ErrUnavailable, err)
	}
	defer s.pool.release(conn)
	var app string
	err = conn.QueryRow(ctx, `
		SELECT a.application_name
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted
		  AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		uint32(leaderLock>>32), uint32(leaderLock&0xffffffff)).Scan(&app)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the leader: %w", err)
	}
	return strings.TrimPrefix(app, appPrefix), nil
}

// Publish implements store.Cluster with NOTIFY.
func (s *Store) Publish(ctx context.Context, topic, payload string) error {
	conn, err := s.pool.acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting to postgres: %w: %w", store.ErrUnavailable, err)
	}
	defer s.pool.release(conn)
	if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, topic, payload); err != nil {
		return fmt.Errorf("notifying %s: %w", topic, err)
	}
	return nil
}

// Listen implements store.Cluster with LISTEN on a connection of its own.
func (s *Store) Listen(ctx context.Context, topics []string, fn func(topic, payload string)) error {
	wait := campaignEvery
	for ctx.Err() == nil {
		err := s.listen(ctx, topics, fn)
		if ctx.Err() != nil {
			break
		}
		s.log.Warn("listening for other replicas' changes; reconnecting", "err", err)
		sleep(ctx, wait)
		wait = min(2*wait, 5*time.Second)
	}
	return ctx.Err()
}

func (s *Store) listen(ctx context.Context, topics []string, fn func(topic, payload string)) error {
	conn, err := s.session(ctx, "listener")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, t := range topics {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{t}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", t, err)
		}
	}
	fn("", "")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Channel, n.Payload)
	}
}

// session opens a connection outside the pool, named after the replica so
// that Leader can tell who holds the lock.
func (s *Store) session(ctx context.Context, name string) (*pgx.Conn, error) {
	cfg := s.pool.cfg.Copy()
	cfg.RuntimeParams["application_name"] = appPrefix + name
	connect, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.ConnectConfig(connect, cfg)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
