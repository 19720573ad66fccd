package service

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
)

// TestSubmissionsShareTransactions: submissions that arrive while one is
// being written are written together in the next transaction, and each
// gets its own answer: a job on a compute that does not exist, a name
// already taken (by a job of the same batch) and a job beyond the queue's
// limit are refused with their own error, without undoing the others; the
// accepted ones are stored with their events, the refused ones left
// nothing, and the queue holds exactly its limit.
func TestSubmissionsShareTransactions(t *testing.T) {
	ctx := t.Context()
	st := seedCPU(t)
	g := &gatedStore{Store: st, release: make(chan struct{})}
	const limit = 20
	s := &Service{Store: g, Catalog: catalog.Default(), Config: config.Server{Limits: config.Limits{Limit: config.Limit{MaxQueuedJobs: limit}}}}
	type sub struct {
		job    *api.Job
		status int // the refusal's, 0 when accepted
	}
	subs := []sub{{job: &api.Job{Name: "alone", Command: "true", Compute: "cpu"}}} // written alone, held by the gate
	for i := range 24 {
		subs = append(subs, sub{job: &api.Job{Name: fmt.Sprintf("job-%d", i), Command: "true", Compute: "cpu"}})
		switch i {
		case 3:
			subs = append(subs, sub{job: &api.Job{Name: "lost", Command: "true", Compute: "nowhere"}, status: 400})
		case 5:
			subs = append(subs, sub{job: &api.Job{Name: "job-2", Command: "true", Compute: "cpu"}, status: 409})
		}
	}
	// In order, so that which jobs find the queue full is known: the
	// first batch holds one, so the 20th accepted is job-18.
	errs := submitInTwoBatches(t, s, g, len(subs), func(i int) error {
		_, err := s.SubmitJob(ctx, "default", subs[i].job)
		return err
	})
	accepted := map[string]bool{}
	for i, sb := range subs {
		want := sb.status
		if sb.status == 0 && len(accepted) == limit {
			want = 429
		}
		var e *Error
		switch {
		case want == 0 && errs[i] != nil:
			t.Errorf("submission %s: %v, want it accepted", sb.job.Name, errs[i])
		case want == 0:
			accepted[sb.job.Name] = true
		case !errors.As(errs[i], &e) || e.Status != want:
			t.Errorf("submission %s: %v, want a %d", sb.job.Name, errs[i], want)
		}
	}
	if err := st.View(ctx, func(tx store.Tx) error {
		js, err := tx.ListJobs(ctx, store.JobFilter{Workspace: "default", Statuses: []string{api.JobQueued}})
		if err != nil {
			return err
		}
		if len(js) != limit || len(accepted) != limit {
			t.Errorf("%d jobs queued, %d accepted; want %d, the limit", len(js), len(accepted), limit)
		}
		for _, j := range js {
			if !accepted[j.Name] {
				t.Errorf("job %s is queued but was refused", j.Name)
			}
			ev, err := tx.ListEvents(ctx, "default", "job/"+j.Name, 0, 0)
			if err != nil {
				return err
			}
			if len(ev) != 1 || ev[0].Kind != "Queued" {
				t.Errorf("events of job %s: %+v, want its Queued", j.Name, ev)
			}
		}
		if _, err := tx.GetJob(ctx, "default", "lost"); !store.IsNotFound(err) {
			t.Errorf("the refused job lost: %v, want not stored", err)
		}
		if n, err := tx.QueuedJobs(ctx, "default"); err != nil || n != limit {
			t.Errorf("QueuedJobs = %d, %v; want %d", n, err, limit)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// submitInTwoBatches makes n submissions, submit(0) to submit(n-1): the
// first is written alone, its transaction held by g until the others
// wait, in order, for the writer; then all of them go in one more
// transaction. It returns each submission's error.
func submitInTwoBatches(t *testing.T, s *Service, g *gatedStore, n int, submit func(i int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = submit(i)
		}()
	}
	start(0)
	for g.updates.Load() == 0 { // the first batch's transaction has begun
		runtime.Gosched()
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; i < n; i++ {
		start(i)
		for waiting(s) != i {
			if time.Now().After(deadline) {
				close(g.release)
				t.Fatalf("write %d of %d did not wait for the writer's batch: %d wait", i+1, n, waiting(s))
			}
			runtime.Gosched()
		}
	}
	close(g.release)
	wg.Wait()
	if u := g.updates.Load(); u != 2 {
		t.Errorf("%d write transactions for %d submissions, want 2 (one alone, then the rest together)", u, n)
	}
	return errs
}

// waiting is how many submissions wait for the writer.
func waiting(s *Service) int {
	s.submits.mu.Lock()
	defer s.submits.mu.Unlock()
	return len(s.submits.next)
}

// TestSubmissionErrorsStayTheirOwn: in one batch, a submission that
// panics and one whose write the store rejects (as PostgreSQL rejects a
// NUL in jsonb) each get their own error, and the others of the batch are
// written and answered as if they had been alone: no submission is failed
// by, or shown, another's error.
func TestSubmissionErrorsStayTheirOwn(t *testing.T) {
	ctx := t.Context()
	st := seedCPU(t)
	g := &gatedStore{Store: st, release: make(chan struct{})}
	s := &Service{Store: g, Catalog: catalog.Default()}
	put := func(name string) func(context.Context, store.Tx) error {
		return func(ctx context.Context, tx store.Tx) error {
			return tx.PutJob(ctx, &api.Job{Name: name, Workspace: "default", Compute: "cpu", Status: api.JobQueued}, "")
		}
	}
	subs := []func(context.Context, store.Tx) error{
		put("alone"), // written alone, held by the gate
		put("good-1"),
		func(ctx context.Context, tx store.Tx) error {
			if err := put("panics")(ctx, tx); err != nil {
				return err
			}
			var m map[string]int
			m["x"] = 1 // a bug
			return nil
		},
		put("good-2"),
		func(ctx context.Context, tx store.Tx) error {
			if err := put("rejected")(ctx, tx); err != nil {
				return err
			}
			return errors.New("putting job rejected: unsupported Unicode escape sequence")
		},
		put("good-3"),
	}
	errs := submitInTwoBatches(t, s, g, len(subs), func(i int) error { return s.inWriteBatch(ctx, subs[i], nil) })
	for i, name := range []string{"alone", "good-1", "panics", "good-2", "rejected", "good-3"} {
		bad := name == "panics" || name == "rejected"
		switch {
		case bad && errs[i] == nil:
			t.Errorf("submission %s succeeded, want its own error", name)
		case bad && !strings.Contains(errs[i].Error(), map[string]string{"panics": "panicked", "rejected": "rejected"}[name]):
			t.Errorf("submission %s: %v, want its own error", name, errs[i])
		case !bad && errs[i] != nil:
			t.Errorf("submission %s: %v, want it written: another submission's error failed it", name, errs[i])
		}
		wantStored(t, st, name, !bad)
	}
}

// TestLeftSubmissionsAreNotWritten: a submission whose client gave up
// while it waited for the writer is answered with its context's error
// and not written, so that a client's retry cannot leave two jobs; the
// others of its batch are written.
func TestLeftSubmissionsAreNotWritten(t *testing.T) {
	ctx := t.Context()
	st := seedCPU(t)
	g := &gatedStore{Store: st, release: make(chan struct{})}
	s := &Service{Store: g, Catalog: catalog.Default()}
	left, cancel := context.WithCancel(ctx)
	cancel()
	names := []string{"alone", "stays-1", "left", "stays-2"}
	errs := submitInTwoBatches(t, s, g, len(names), func(i int) error {
		c := ctx
		if names[i] == "left" {
			c = left
		}
		_, err := s.SubmitJob(c, "default", &api.Job{Name: names[i], Command: "true", Compute: "cpu"})
		return err
	})
	for i, name := range names {
		gone := name == "left"
		if gone != (errs[i] != nil) || gone && !errors.Is(errs[i], context.Canceled) {
			t.Errorf("submission %s: %v", name, errs[i])
		}
		wantStored(t, st, name, !gone)
	}
}

// TestSnapshotsLookedUpBeforeTheWriter: whether a submission's code and
// inputs were uploaded is asked of the blob store (a request each, in
// Azure) before the submission waits for the store's writer, not inside
// its transaction; a job naming a snapshot that was not uploaded is still
// refused, naming its field.
func TestSnapshotsLookedUpBeforeTheWriter(t *testing.T) {
	ctx := t.Context()
	st := seedCPU(t)
	w := &writerWatch{Store: st}
	b := &watchedBlobs{writer: w, have: map[string]bool{"code1": true, "data1": true}}
	s := &Service{Store: w, Catalog: catalog.Default(), Blobs: b}
	j := &api.Job{Name: "uploaded", Command: "true", Compute: "cpu", Code: api.BlobRef("code1", ""),
		Inputs: map[string]api.JobInput{"d": {Type: api.InputURIFolder, Path: api.BlobRef("data1", "")}}}
	if _, err := s.SubmitJob(ctx, "default", j); err != nil {
		t.Fatalf("a job whose snapshots were uploaded: %v", err)
	}
	_, err := s.SubmitJob(ctx, "default", &api.Job{Name: "missing", Command: "true", Compute: "cpu", Code: api.BlobRef("code2", "")})
	if err == nil || !strings.Contains(err.Error(), "code: snapshot") {
		t.Errorf("a job whose code was not uploaded: %v, want a refusal naming code", err)
	}
	if b.asked.Load() < 2 {
		t.Errorf("the blob store was asked %d times, want at least 2", b.asked.Load())
	}
	if n := b.askedInside.Load(); n != 1 {
		t.Errorf("the blob store was asked %d times inside a write transaction, want 1 (the snapshot not found, asked again where its error is made)", n)
	}
}

// writerWatch is a store that says when one of its write transactions runs.
type writerWatch struct {
	store.Store
	writing atomic.Bool
}

func (w *writerWatch) Update(ctx context.Context, fn func(store.Tx) error) error {
	return w.Store.Update(ctx, func(tx store.Tx) error {
		w.writing.Store(true)
		defer w.writing.Store(false)
		return fn(tx)
	})
}

// watchedBlobs holds the snapshots have, and counts the questions asked
// of it, and those asked while writer writes.
type watchedBlobs struct {
	writer      *writerWatch
	have        map[string]bool
	asked       atomic.Int64
	askedInside atomic.Int64
}

func (b *watchedBlobs) Has(ctx context.Context, digest string) bool {
	b.asked.Add(1)
	if b.writer.writing.Load() {
		b.askedInside.Add(1)
	}
	return b.have[digest]
}

// TestSubmitToAMissingWorkspace: a job submitted to a workspace that does
// not exist is refused with the workspace's 404, though a submission
// reads the workspace only when its job is refused; serverless ones too
// (their hidden compute is written first). Nothing is stored.
func TestSubmitToAMissingWorkspace(t *testing.T) {
	ctx := t.Context()
	st := seedCPU(t)
	s := &Service{Store: st, Catalog: catalog.Default(), Config: config.Default()}
	for _, j := range []*api.Job{
		{Name: "on-cpu", Command: "true", Compute: "cpu"},
		{Name: "serverless", Command: "true", Resources: &api.JobResources{InstanceType: "Standard_DS3_v2"}},
	} {
		_, err := s.SubmitJob(ctx, "nowhere", j)
		var e *Error
		if !errors.As(err, &e) || e.Status != 404 || !strings.Contains(e.Msg, `workspace "nowhere" not found`) {
			t.Errorf("job %s in a missing workspace: %v; want the workspace's 404", j.Name, err)
		}
	}
	err := st.View(ctx, func(tx store.Tx) error {
		js, err := tx.ListJobs(ctx, store.JobFilter{Workspace: "nowhere"})
		if len(js) != 0 {
			t.Errorf("jobs stored in a missing workspace: %v", js)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
