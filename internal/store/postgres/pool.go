package postgres

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
)

// pool is a small connection pool. It stands in for pgxpool, which needs
// github.com/jackc/puddle/v2 in go.mod; the store only needs acquire and
// release, and this keeps connections that are healthy and idle.
type pool struct {
	cfg *pgx.ConnConfig
	// slots holds one token per connection that may be open.
	slots chan struct{}

	mu     sync.Mutex
	idle   []*pgx.Conn
	closed bool
}

var errPoolClosed = errors.New("store is closed")

func newPool(cfg *pgx.ConnConfig, size int) *pool {
	p := &pool{cfg: cfg, slots: make(chan struct{}, size)}
	for range size {
		p.slots <- struct{}{}
	}
	return p
}

// acquire returns an idle connection or dials one, waiting while all the
// pool's connections are in use.
func (p *pool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case <-p.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.slots <- struct{}{}
		return nil, errPoolClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := pgx.ConnectConfig(ctx, p.cfg.Copy())
	if err != nil {
		p.slots <- struct{}{}
		return nil, err
	}
	return c, nil
}

// release gives a connection back. A connection that is broken or still in
// a transaction (a failed rollback) is closed instead of reused.
func (p *pool) release(c *pgx.Conn) {
	defer func() { p.slots <- struct{}{} }()
	reusable := !c.IsClosed() && c.PgConn().TxStatus() == 'I'
	p.mu.Lock()
	if reusable && !p.closed {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	c.Close(context.Background())
}

// close closes the idle connections; connections in use are closed when
// they are released.
func (p *pool) close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.Close(context.Background()))
	}
	return errors.Join(errs...)
}
