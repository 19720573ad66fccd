// Package simagent plays the agents of many nodes from goroutines of a
// test: each speaks the real agent protocol (register, hold the assignment
// stream, heartbeat, report assignments running and ended, send log lines,
// upload and download checkpoints) with the token the server gave its node
// through the fake provider's token_dir, but runs no process. The scale
// benchmark (bench) and the chaos suite's preemption storm
// (internal/chaos) run hundreds to 10,000 nodes with it.
package simagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/beatline"
)

// Runner runs an assignment on a simulated node once the agent reported it
// running. stop receives the server's cancel (a preemption has Preempt
// set). It returns the attempt's final status (Completed, or Failed with
// Preempted when the node was taken away), which the agent then reports.
type Runner func(ctx context.Context, a *Agent, as *api.Assignment, stop <-chan api.Cancel) api.AssignmentStatus

// Agent is the agent of one simulated node.
type Agent struct {
	ID    string
	base  string
	token string
	hc    *http.Client // requests
	strm  *http.Client // the assignment stream
	beats *atomic.Int64
	// reconnects counts the sessions after the first (Fleet.Reconnects).
	reconnects *atomic.Int64
	// held receives the agent each time it starts holding an assignment
	// (Options.Hold); run runs it (Options.Run).
	held chan<- *Agent
	run  Runner

	mu    sync.Mutex
	cur   *api.Assignment // held, reported running
	last  string          // the last assignment ended
	stops map[string]chan api.Cancel
}

func (a *Agent) do(ctx context.Context, method, path string, body io.Reader, ctype string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, fmt.Errorf("node %s: %s %s: HTTP %d: %s", a.ID, method, path, resp.StatusCode, msg)
	}
	if w, ok := out.(io.Writer); ok {
		_, err = io.Copy(w, resp.Body)
		return resp.StatusCode, err
	}
	if out != nil {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func (a *Agent) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = a.do(ctx, http.MethodPost, path, bytes.NewReader(b), "application/json", out)
	return err
}

func assignmentPath(as *api.Assignment, what string) string {
	return "/v1/agent/assignments/" + url.PathEscape(as.ID) + "/" + what
}

// Report sends the status of assignment as.
func (a *Agent) Report(ctx context.Context, as *api.Assignment, st api.AssignmentStatus) error {
	st.ID, st.NodeRank = as.ID, as.NodeRank
	if st.Time.IsZero() {
		st.Time = time.Now().UTC()
	}
	if st.Status == api.JobCompleted && st.ExitCode == nil {
		st.ExitCode = new(int)
	}
	return a.post(ctx, assignmentPath(as, "status"), st, nil)
}

// Log sends lines of assignment as, numbered from first (the node's line
// numbers start at 1 per assignment; the final status's LastNodeSeq says
// how many there were).
func (a *Agent) Log(ctx context.Context, as *api.Assignment, first int64, lines ...string) error {
	b := api.LogBatch{}
	for i, l := range lines {
		b.Lines = append(b.Lines, api.LogLine{Node: as.NodeRank, NodeSeq: first + int64(i), Time: time.Now().UTC(), Stream: "stdout", Text: l})
	}
	return a.post(ctx, assignmentPath(as, "logs"), b, nil)
}

// Checkpoint downloads the job's latest checkpoint archive (the tar.gz the
// agent uploads); nil when none was saved.
func (a *Agent) Checkpoint(ctx context.Context, as *api.Assignment) ([]byte, error) {
	var buf bytes.Buffer
	code, err := a.do(ctx, http.MethodGet, assignmentPath(as, "checkpoint"), nil, "", &buf)
	if code == http.StatusNotFound {
		return nil, nil
	}
	return buf.Bytes(), err
}

// SaveCheckpoint uploads the job's checkpoint archive.
func (a *Agent) SaveCheckpoint(ctx context.Context, as *api.Assignment, archive []byte) error {
	_, err := a.do(ctx, http.MethodPut, assignmentPath(as, "checkpoint"), bytes.NewReader(archive), "application/gzip", nil)
	return err
}

// Complete reports the held assignment completed (Options.Hold); the
// node is idle then.
func (a *Agent) Complete(ctx context.Context) error {
	a.mu.Lock()
	as := a.cur
	a.cur = nil
	if as != nil {
		a.last = as.ID
	}
	a.mu.Unlock()
	if as == nil {
		return fmt.Errorf("node %s holds no assignment", a.ID)
	}
	return a.Report(ctx, as, api.AssignmentStatus{Status: api.JobCompleted})
}

// assigned handles an assign event: one already held or done is ignored
// (the server re-sends what the store holds when a stream catches up).
func (a *Agent) assigned(ctx context.Context, as api.Assignment) error {
	a.mu.Lock()
	dup := a.cur != nil && a.cur.ID == as.ID || a.last == as.ID
	var stop chan api.Cancel
	if !dup {
		a.cur = &as
		stop = make(chan api.Cancel, 1)
		a.stops[as.ID] = stop
	}
	a.mu.Unlock()
	if dup {
		return nil
	}
	if err := a.Report(ctx, &as, api.AssignmentStatus{Status: api.JobRunning}); err != nil {
		return err
	}
	switch {
	case a.run != nil:
		go func() {
			st := a.run(ctx, a, &as, stop)
			if ctx.Err() != nil {
				return
			}
			a.mu.Lock()
			a.cur, a.last = nil, as.ID
			delete(a.stops, as.ID)
			a.mu.Unlock()
			if err := a.Report(ctx, &as, st); err != nil && ctx.Err() == nil {
				// A real agent keeps the status and retries; one retry
				// covers a keep-alive connection reset.
				_ = a.Report(ctx, &as, st)
			}
		}()
		return nil
	case a.held != nil:
		a.held <- a
		return nil
	}
	return a.Complete(ctx)
}

// canceled hands a cancel event to the assignment's runner.
func (a *Agent) canceled(data string) error {
	var c api.Cancel
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return fmt.Errorf("node %s: cancel: %w", a.ID, err)
	}
	a.stop(c)
	return nil
}

// stop hands a cancel to the runner of its assignment, if it runs one.
func (a *Agent) stop(c api.Cancel) {
	a.mu.Lock()
	stop := a.stops[c.ID]
	a.mu.Unlock()
	if stop != nil {
		select {
		case stop <- c:
		default: // a repeated notice: the first one is being handled
		}
	}
}

// listen reads the assignment stream until it ends (sctx, the session,
// ends it too); assignments run under ctx, the agent's. Its error goes to
// errs if the session still listens.
func (a *Agent) listen(ctx, sctx context.Context, body io.ReadCloser, errs chan<- error, beats *beatline.Line) {
	defer body.Close()
	if beats != nil {
		defer beats.End()
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 4096), 1<<20)
	event := ""
	report := func(err error) {
		if sctx.Err() == nil {
			select {
			case errs <- err:
			default:
			}
		}
	}
	for sc.Scan() {
		line := sc.Text()
		var err error
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "assign":
			var as api.Assignment
			if err = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &as); err != nil {
				err = fmt.Errorf("node %s: assignment: %w", a.ID, err)
				break
			}
			err = a.assigned(ctx, as)
		case strings.HasPrefix(line, "data: ") && event == "cancel":
			err = a.canceled(strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, "data: ") && (event == "beat" || event == "beat_error") && beats != nil:
			beats.Answer(event, strings.TrimPrefix(line, "data: "))
		case line == "":
			event = ""
		}
		if err != nil {
			report(err)
			return
		}
	}
	report(fmt.Errorf("node %s: the server closed the assignment stream: %v", a.ID, sc.Err()))
}

// heartbeat is what a real agent reports (see the agent's heartbeatLoop): what it
// runs and used, the node's utilization and its input cache.
func (a *Agent) heartbeat() api.AgentHeartbeat {
	hb := api.AgentHeartbeat{NodeID: a.ID, Utilization: &api.NodeUtilization{CPUPercent: 1.5, MemoryBytes: 40 << 20},
		Cache: &api.NodeCache{LimitBytes: 10 << 30}}
	a.mu.Lock()
	if a.cur != nil {
		hb.Running = []string{a.cur.ID}
		hb.Usage = map[string]api.JobUsage{a.cur.ID: {CPUSeconds: 0.1, MemoryBytes: 1 << 20, PeakMemoryBytes: 1 << 20}}
	}
	a.mu.Unlock()
	return hb
}

// Run registers, holds the stream and heartbeats until ctx ends, and like
// a real agent connects again when the server goes away (a restart): it
// registers with the assignment it runs, which the server keeps or tells
// it to cancel. It returns an error once it could not reach the server for
// a minute, nil when ctx ended.
func (a *Agent) Run(ctx context.Context) error {
	lastOK := time.Now()
	for {
		connected, err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			lastOK = time.Now()
			if a.reconnects != nil {
				a.reconnects.Add(1)
			}
		}
		if time.Since(lastOK) > time.Minute {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// session registers, holds the stream and heartbeats until one of them
// fails; connected says it got as far as the stream.
func (a *Agent) session(ctx context.Context) (connected bool, err error) {
	hello := api.AgentHello{NodeID: a.ID, Capacity: api.Capacity{VCPUs: 4, MemoryGB: 14}}
	a.mu.Lock()
	if a.cur != nil {
		hello.Running = []api.AssignmentStatus{{ID: a.cur.ID, NodeRank: a.cur.NodeRank, Status: api.JobRunning}}
	}
	a.mu.Unlock()
	var w api.AgentWelcome
	if err := a.post(ctx, "/v1/agent/register", hello, &w); err != nil {
		return false, err
	}
	for _, id := range w.Cancel {
		a.stop(api.Cancel{ID: id, Reason: "the server no longer wants this assignment"})
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// As a real agent: the stream's request body carries the heartbeats
	// (the agent's own beatline); a server that takes only GET gets them
	// by request.
	beats := beatline.New()
	defer beats.Close(nil)
	// As a real agent: the body ends with the session, or when no answer
	// came in time (net/http waits for it to end before it returns a
	// failed connection's error).
	stop := context.AfterFunc(sctx, func() { beats.Close(context.Canceled) })
	defer stop()
	slow := time.AfterFunc(30*time.Second, func() { beats.Close(errors.New("no answer to the stream's request in 30 s")) })
	resp, err := a.openStream(sctx, http.MethodPost, beats.Body())
	slow.Stop()
	if err == nil && (resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotFound) {
		resp.Body.Close()
		beats.Close(nil)
		beats = nil
		resp, err = a.openStream(sctx, http.MethodGet, nil)
	}
	if err != nil {
		return false, fmt.Errorf("node %s: stream: %w", a.ID, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return false, fmt.Errorf("node %s: stream: HTTP %d", a.ID, resp.StatusCode)
	}
	errs := make(chan error, 1)
	go a.listen(ctx, sctx, resp.Body, errs, beats)
	every := time.Duration(w.HeartbeatSeconds) * time.Second
	if every <= 0 {
		every = 2 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-errs:
			return true, err
		case <-tick.C:
			reply, err := a.beat(ctx, &beats)
			if err != nil {
				if ctx.Err() != nil {
					return true, nil
				}
				// A keep-alive connection the server closed just as a
				// heartbeat was sent on it resets once in a while: the
				// next tick tries again, and a third failure starts over.
				if failed++; failed == 3 {
					return true, fmt.Errorf("node %s: 3 heartbeats in a row failed, the last: %w", a.ID, err)
				}
				continue
			}
			failed = 0
			a.beats.Add(1)
			// As a real agent: stop what the store does not place here,
			// run what it does and this agent missed.
			for _, id := range reply.Cancel {
				a.stop(api.Cancel{ID: id, Reason: "the server no longer wants this assignment"})
			}
			if reply.Assign != nil {
				if err := a.assigned(ctx, *reply.Assign); err != nil {
					return true, err
				}
			}
		}
	}
}

// openStream opens the assignment stream: POST with the heartbeats' body,
// or GET.
func (a *Agent) openStream(ctx context.Context, method string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/v1/agent/stream", body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "text/event-stream")
	if body != nil {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	return a.strm.Do(req)
}

// beat sends a heartbeat on the session's stream while it carries them
// (*beats non-nil), else by request, and returns the server's answer. As
// a real agent's, once one went unanswered for 10 s, the rest of the
// session's go by request.
func (a *Agent) beat(ctx context.Context, beats **beatline.Line) (api.AgentHeartbeatReply, error) {
	hb := a.heartbeat()
	if *beats != nil {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		reply, err := (*beats).Send(hctx, hb)
		cancel()
		switch {
		case err == nil:
			return reply, nil
		case errors.Is(err, beatline.ErrGone):
			// sent by request below
		case ctx.Err() != nil:
			return reply, ctx.Err()
		case hctx.Err() != nil:
			*beats = nil
			return reply, fmt.Errorf("node %s: heartbeat on the stream: no answer in 10 s", a.ID)
		default:
			return reply, fmt.Errorf("node %s: %w", a.ID, err)
		}
	}
	var reply api.AgentHeartbeatReply
	err := a.post(ctx, "/v1/agent/heartbeat", hb, &reply)
	return reply, err
}
