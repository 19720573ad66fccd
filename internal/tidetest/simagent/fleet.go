package simagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
)

// Options shape a fleet.
type Options struct {
	// URL is the server's.
	URL string
	// TokenDir is the fake provider's token_dir: one file per node, named
	// by its id, holding its token.
	TokenDir string
	// Hold, when set, receives each agent when it starts holding an
	// assignment; the test ends it with Agent.Complete.
	Hold chan<- *Agent
	// Run, when set, runs each assignment (see Runner). With neither Hold
	// nor Run an agent completes each assignment at once.
	Run Runner
	// Watch keeps the fleet in step with TokenDir: an agent starts for
	// each node the server creates later and stops when its node is
	// deleted (its token file goes), as a preempted node's replacement
	// comes and the preempted node leaves.
	Watch bool
}

// MaxConns bounds the connections the agents' requests (not their
// streams) share: each stream holds one connection, and this machine allows
// 20,000 open files per process, so 10,000 agents cannot each keep a
// second one as a real agent would.
const MaxConns = 512

// Fleet is the running agents of a token folder's nodes.
type Fleet struct {
	o      Options
	hc     *http.Client
	strm   *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
	// Beats counts the heartbeats the server took.
	Beats atomic.Int64
	// Reconnects counts the agents' sessions that broke (a server
	// restart ends every one) and were started again.
	Reconnects atomic.Int64

	mu     sync.Mutex
	agents map[string]*running
	gone   int // agents stopped because their node was deleted
}

type running struct {
	a    *Agent
	stop context.CancelFunc
}

// Start starts a fleet; its agents start as their nodes' tokens appear
// (see WaitNodes and Options.Watch).
func Start(o Options) *Fleet {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fleet{o: o, ctx: ctx, cancel: cancel, errs: make(chan error, 64), agents: map[string]*running{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: MaxConns, MaxConnsPerHost: MaxConns}},
		// As a real agent's: a stream's connection is its own (see the
		// agent's streamClient).
		strm: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	if o.Watch {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for ctx.Err() == nil {
				if err := f.scan(); err != nil {
					f.fail(err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	return f
}

func (f *Fleet) fail(err error) {
	select {
	case f.errs <- err:
	default: // the first errors are enough
	}
}

// scan starts an agent for each new token and stops those whose token went.
func (f *Fleet) scan() error {
	es, err := os.ReadDir(f.o.TokenDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	seen := map[string]bool{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range es {
		id := e.Name()
		if strings.HasPrefix(id, ".") {
			continue // a token being written
		}
		seen[id] = true
		if f.agents[id] != nil || f.ctx.Err() != nil {
			continue
		}
		tok, err := os.ReadFile(filepath.Join(f.o.TokenDir, id))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		a := &Agent{ID: id, base: f.o.URL, token: string(tok), hc: f.hc, strm: f.strm, beats: &f.Beats, reconnects: &f.Reconnects,
			held: f.o.Hold, run: f.o.Run, stops: map[string]chan api.Cancel{}}
		ctx, stop := context.WithCancel(f.ctx)
		f.agents[id] = &running{a: a, stop: stop}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			err := a.Run(ctx)
			if _, serr := os.Stat(filepath.Join(f.o.TokenDir, id)); err != nil && serr == nil {
				f.fail(err) // a node deleted meanwhile may fail as it likes
			}
		}()
	}
	for id, r := range f.agents {
		if !seen[id] && r.stop != nil {
			r.stop()
			r.stop = nil
			f.gone++
		}
	}
	return nil
}

// WaitNodes starts the agents of the nodes created so far until there are
// n of them, or fails after d.
func (f *Fleet) WaitNodes(n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if err := f.scan(); err != nil {
			return err
		}
		f.mu.Lock()
		got := len(f.agents) - f.gone
		f.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %d sim node tokens in %s (%d there)", d, n, f.o.TokenDir, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Len is the number of agents running.
func (f *Fleet) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.agents) - f.gone
}

// Err returns the first error of an agent since the last call, if any.
func (f *Fleet) Err() error {
	select {
	case err := <-f.errs:
		return err
	default:
		return nil
	}
}

// Errs delivers the agents' errors.
func (f *Fleet) Errs() <-chan error { return f.errs }

// Stop ends every agent and waits for them.
func (f *Fleet) Stop() {
	f.cancel()
	f.wg.Wait()
}
