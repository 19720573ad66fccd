package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/tidetest"
)

// TestServerKill kills the server with SIGKILL every few seconds while jobs
// stream through 8 nodes, on SQLite and on PostgreSQL. Each job appends its
// name to a file once. Every job must end exactly once (one terminal
// event), Completed, its line in the file exactly once, none stuck; after
// the last restart and the compute's deletion no agent or job process is
// left.
func TestServerKill(t *testing.T) {
	for _, st := range []string{"sqlite", "postgres"} {
		t.Run(st, func(t *testing.T) {
			store := ""
			if st == "postgres" {
				store = pgtest.Start(t)
			}
			serverKill(t, st, store)
		})
	}
}

func serverKill(t *testing.T, name, store string) {
	jobs := jobCount(12, 1000)
	every := time.Duration(scale(4, 4)) * time.Second
	// The short form's few jobs run long enough for the killer to strike
	// (at 0.2 s each, 12 jobs ended before the first kill).
	work := []string{"3", "0.2"}[scale(0, 1)]
	s := newServer(t, options{store: store})
	effectsFile := tidetest.JobWritable(t, filepath.Join(s.dir, "effects"))
	s.createCompute("name: chaos\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 8\nmax_instances: 8\nidle_time_before_scale_down: 600\n")
	start := time.Now()

	// The killer: SIGKILL, restart at once, until every job has ended.
	var kills atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s.kill()
			kills.Add(1)
			if err := s.restart(); err != nil {
				t.Error(err)
				return
			}
		}
	})

	names := make([]string, jobs)
	for i := range jobs {
		names[i] = fmt.Sprintf("kill-%04d", i)
		s.submit(fmt.Sprintf("name: %s\ncompute: chaos\ncommand: echo $TIDE_JOB_NAME >> %s; sleep %s\n", names[i], effectsFile, work))
	}
	ctx := context.Background()
	// Every job ends; a job still unfinished at the deadline is stuck.
	deadline := time.Now().Add(time.Duration(scale(180, 1800)) * time.Second)
	ended := map[string]*api.Job{}
	for len(ended) < jobs && time.Now().Before(deadline) {
		for _, n := range names {
			if ended[n] != nil {
				continue
			}
			j, err := s.client.Job(ctx, "default", n)
			if err == nil && api.JobTerminal(j.Status) {
				ended[n] = j
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	took := time.Since(start)

	lost, dup := s.exactlyOnce(names, effectsFile, time.Now())
	// No process is left once the compute is gone.
	s.deleteCompute("chaos")
	s.stop()
	waitFor(t, "no agent or job process left", 30*time.Second, func() bool { return len(orphans(s.data)) == 0 })
	record(row{scenario: "server kill -9 every " + every.String() + ", " + name, jobs: jobs, kills: int(kills.Load()), lost: lost, duplicated: dup, took: took.Round(time.Second).String()})
}
