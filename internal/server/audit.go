package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// auditLog keeps every mutating API call (who, what, when, from where,
// result) in the store. Entries are written in batches a few milliseconds
// after the call, so auditing costs a submission no transaction of its
// own; flush writes what is pending (before the audit log is read, and
// when the server stops).
type auditLog struct {
	store store.Store
	log   *slog.Logger
	now   func() time.Time

	mu       sync.Mutex
	pending  []api.AuditEntry
	touched  map[string]time.Time // token hash -> last use to record
	lastUse  map[string]time.Time // token hash -> last use recorded
	wake     chan struct{}
	stopping <-chan struct{}
	once     sync.Once
	writeMu  sync.Mutex // one writer at a time, so entries keep their order
}

// newAuditLog returns the audit log, whose writer stops with stopping
// (the server then writes what is left with flush).
func newAuditLog(st store.Store, log *slog.Logger, now func() time.Time, stopping <-chan struct{}) *auditLog {
	return &auditLog{store: st, log: log, now: now, touched: map[string]time.Time{}, lastUse: map[string]time.Time{}, wake: make(chan struct{}, 1), stopping: stopping}
}

// audited says whether a call goes to the audit log: every call that may
// change something, except agents' reports.
func (s *Server) audited(rt route, r *http.Request) bool {
	return r.Method != "GET" && r.Method != "HEAD" && r.Method != "OPTIONS" && rt.auth != authNode
}

// add records a finished call.
func (a *auditLog) add(r *http.Request, rt route, status int) {
	if status == 0 {
		status = 200
	}
	if status == http.StatusTooManyRequests {
		// A refused submission changed nothing, and a burst of them
		// would write one entry each; tide_submissions_refused_total
		// counts them by workspace and limit instead.
		return
	}
	p := principalOf(r)
	user := p.user
	if user == "" {
		user = "(not signed in)"
	}
	e := api.AuditEntry{Time: a.now(), User: user, Method: r.Method, Path: r.URL.Path, Workspace: r.PathValue("workspace"),
		Action: rt.summary, Status: status, Remote: r.RemoteAddr}
	a.mu.Lock()
	a.pending = append(a.pending, e)
	a.mu.Unlock()
	a.kick()
}

// touch notes that a token was used; its last use is written at most once
// a minute.
func (a *auditLog) touch(hash string, at time.Time) {
	a.mu.Lock()
	if at.Sub(a.lastUse[hash]) < time.Minute {
		a.mu.Unlock()
		return
	}
	a.lastUse[hash] = at
	a.touched[hash] = at
	a.mu.Unlock()
	a.kick()
}

func (a *auditLog) kick() {
	a.once.Do(func() { go a.run() })
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *auditLog) run() {
	for {
		select {
		case <-a.stopping:
			return
		case <-a.wake:
		}
		time.Sleep(20 * time.Millisecond) // gather a batch
		a.flush(context.Background())
	}
}

// flush writes what is pending.
func (a *auditLog) flush(ctx context.Context) {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	a.mu.Lock()
	entries, touched := a.pending, a.touched
	a.pending, a.touched = nil, map[string]time.Time{}
	a.mu.Unlock()
	if len(entries) == 0 && len(touched) == 0 {
		return
	}
	err := a.store.Update(ctx, func(tx store.Tx) error {
		if err := tx.AddAudit(ctx, entries); err != nil {
			return err
		}
		for hash, at := range touched {
			t, err := tx.GetToken(ctx, hash)
			if store.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			t.LastUsed = at
			if err := tx.PutToken(ctx, t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		// Keep the entries for the next flush: an audit entry is never
		// dropped for a store that is briefly unavailable.
		a.log.Error("writing the audit log", "entries", len(entries), "err", err)
		a.mu.Lock()
		a.pending = append(entries, a.pending...)
		a.mu.Unlock()
	}
}
