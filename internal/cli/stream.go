package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
)

// streamJob follows a job's log until the job ends, then prints a summary
// and returns a *JobOutcomeError unless the job completed.
func (r *run) streamJob(ctx context.Context, cl *api.Client, name string) error {
	v := &streamView{
		stdout: r.app.Stdout,
		stderr: r.app.Stderr,
		tty:    isTerminal(r.app.Stderr),
		now:    r.app.Now,
		job:    name,
	}
	// The stream sends stored lines before the job's status, so the job's
	// node count (whether lines carry "[node-K] ") is asked first: a
	// replayed or finished log is prefixed as a live one is.
	c, cancel := context.WithTimeout(ctx, requestTimeout)
	j, err := cl.Job(c, r.workspace, name)
	cancel()
	if err != nil {
		return err
	}
	v.multi = j.InstanceCount() > 1
	stop := v.startTicker()
	err = cl.StreamLogs(ctx, r.workspace, name, api.StreamOptions{OnReconnect: v.reconnecting}, v.event)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(r.app.Stderr, "Stopped following job %s; it keeps running ('tide job cancel %s' stops it).\n", name, name)
		}
		return err
	}
	final := v.last
	if final == nil || !api.JobTerminal(final.Status) {
		// The end event carried no job: ask for it.
		c, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if final, err = cl.Job(c, r.workspace, name); err != nil {
			return err
		}
	}
	fmt.Fprintln(r.app.Stderr, summary(final))
	if final.Status != api.JobCompleted {
		return &JobOutcomeError{Job: final.Name, Status: final.Status}
	}
	return nil
}

// summary is the line that ends a stream.
func summary(j *api.Job) string {
	var took string
	switch {
	case !j.StartTime.IsZero() && !j.EndTime.IsZero():
		took = age(j.EndTime.Sub(j.StartTime))
	case !j.CreatedOn.IsZero() && !j.EndTime.IsZero():
		took = age(j.EndTime.Sub(j.CreatedOn))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s %s", j.Name, strings.ToLower(j.Status))
	if took != "" {
		if j.Status == api.JobCompleted {
			fmt.Fprintf(&b, " in %s", took)
		} else {
			fmt.Fprintf(&b, " after %s", took)
		}
	}
	switch {
	case j.Error != "":
		fmt.Fprintf(&b, ": %s", j.Error)
	case j.ExitCode != nil && *j.ExitCode != 0:
		fmt.Fprintf(&b, ": exit code %d", *j.ExitCode)
	}
	return b.String() + "."
}

// streamView renders a log stream: log lines on stdout; status changes,
// waiting reasons and connection trouble on stderr. On a terminal the
// waiting line is redrawn every second so the user sees how long the job
// has waited.
type streamView struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	tty            bool
	now            func() time.Time
	job            string

	last        *api.Job
	status      string
	since       time.Time // when the current status began
	reason      string
	multi       bool   // more than one node: prefix lines with the rank
	drawn       bool   // a waiting line is on the terminal, without newline
	printedWait string // the waiting line last printed (no terminal)
	lost        bool   // the connection dropped and did not come back yet
}

func waiting(status string) bool {
	return status == api.JobNotStarted || status == api.JobQueued || status == api.JobPreparing
}

func (v *streamView) event(ev api.LogEvent) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lost {
		v.clear()
		fmt.Fprintln(v.stderr, "Reconnected.")
		v.lost = false
	}
	switch ev.Type {
	case api.LogEventLine:
		v.clear()
		fmt.Fprintln(v.stdout, ev.Line.Display(v.multi))
	case api.LogEventStatus, api.LogEventEnd:
		if ev.Job != nil {
			v.setJob(ev.Job)
		}
	}
	return nil
}

// setJob records a job update and prints what changed.
func (v *streamView) setJob(j *api.Job) {
	first := v.last == nil
	v.last = j
	v.multi = j.InstanceCount() > 1
	if j.Status != v.status {
		v.clear()
		v.since = v.now()
		if first && (j.Status == api.JobQueued || j.Status == api.JobNotStarted) && !j.CreatedOn.IsZero() {
			v.since = j.CreatedOn
		}
		// A waiting status is shown by its waiting line, which names it.
		if !waiting(j.Status) {
			fmt.Fprintf(v.stderr, "Status: %s\n", j.Status)
		}
		v.status = j.Status
		v.printedWait = ""
	}
	v.reason = j.PendingReason
	v.drawWaiting()
}

// waitLine is "Queued 12s: waiting for 1 node to start on cpu-cluster".
func (v *streamView) waitLine() string {
	s := fmt.Sprintf("%s %s", v.status, age(v.now().Sub(v.since)))
	if v.reason != "" {
		s += ": " + v.reason
	}
	return s
}

func (v *streamView) drawWaiting() {
	if !waiting(v.status) {
		return
	}
	if v.tty {
		fmt.Fprintf(v.stderr, "\r\033[K%s", v.waitLine())
		v.drawn = true
		return
	}
	// Without a terminal, say it once per status and reason.
	key := v.status + "\x00" + v.reason
	if key != v.printedWait {
		fmt.Fprintln(v.stderr, v.waitLine())
		v.printedWait = key
	}
}

// clear removes the waiting line from the terminal before other output.
func (v *streamView) clear() {
	if v.drawn {
		fmt.Fprint(v.stderr, "\r\033[K")
		v.drawn = false
	}
}

func (v *streamView) reconnecting(err error, attempt int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if attempt == 1 || attempt%10 == 0 {
		v.clear()
		fmt.Fprintf(v.stderr, "Lost the connection to the server (%v); reconnecting...\n", err)
	}
	v.lost = true
}

// startTicker redraws the waiting line every second on a terminal; the
// returned function stops it and waits for it to end.
func (v *streamView) startTicker() (stop func()) {
	if !v.tty {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				v.mu.Lock()
				if v.drawn {
					v.drawWaiting()
				}
				v.mu.Unlock()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		v.mu.Lock()
		v.clear()
		v.mu.Unlock()
	}
}
