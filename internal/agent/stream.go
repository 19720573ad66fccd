package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/beatline"
)

// stream holds the assignment stream and dispatches its events. Opened
// with POST, it carries the heartbeats too (below); a server that
// takes it only with GET gets them by request.
func (a *agent) stream(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	line, resp, err := a.openBeatStream(sctx)
	if line == nil && err == nil {
		resp, err = a.openStream(sctx, nil)
	}
	if err != nil {
		a.client.failover()
		return fmt.Errorf("opening stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 500 {
			a.client.failover()
		}
		return fmt.Errorf("opening stream: %w", &statusError{Code: resp.StatusCode, Body: resp.Status})
	}
	if line != nil {
		a.beats.set(line)
		defer line.End()
		defer a.beats.drop(line)
	}
	// The watchdog cancels the request when the stream stays silent.
	idle := time.AfterFunc(a.cfg.StreamIdleTimeout, cancel)
	defer idle.Stop()
	gotData := false
	err = readSSE(resp.Body, func() {
		gotData = true
		idle.Reset(a.cfg.StreamIdleTimeout)
	}, func(ev sseEvent) error {
		if ev.Name == "beat" || ev.Name == "beat_error" {
			if line != nil {
				line.Answer(ev.Name, ev.Data)
			}
			return nil
		}
		a.handleEvent(ctx, ev)
		return nil
	})
	if gotData {
		return fmt.Errorf("%w: %w", errStreamHealthy, err)
	}
	return fmt.Errorf("reading stream: %w", err)
}

// openBeatStream opens the stream with POST, its body the heartbeats'
// line. It returns a nil line, and no error, when the stream is to be
// opened with GET:
//   - a server that does not take it with POST answers 405 (404 before
//     streams), or, behind a catch-all route, something that is not an
//     event stream;
//   - behind a proxy that passes a request on only once its body ended
//     (nginx's proxy_request_buffering, on by default), no answer comes:
//     streams are opened with GET for an hour.
func (a *agent) openBeatStream(ctx context.Context) (*beatline.Line, *http.Response, error) {
	if time.Now().UnixNano() < a.getUntil.Load() {
		return nil, nil, nil
	}
	line := beatline.New()
	// net/http writes a request's body while it waits for the answer,
	// and should the connection fail first, it waits for that body to
	// end before it returns the error: the body is ended when the session
	// ends, and when no answer came in time.
	stop := context.AfterFunc(ctx, func() { line.Close(context.Canceled) })
	slow := time.AfterFunc(streamOpenTimeout, func() { line.Close(errNoStreamAnswer) })
	resp, err := a.openStream(ctx, line.Body())
	slow.Stop()
	end := func() {
		stop()
		line.Close(nil)
	}
	switch {
	case errors.Is(err, errNoStreamAnswer):
		end()
		a.getUntil.Store(time.Now().Add(time.Hour).UnixNano())
		a.log.WarnContext(ctx, "the stream opened with POST got no answer (a proxy that buffers request bodies?): opening it with GET for an hour; heartbeats go by request", slog.Duration("waited", streamOpenTimeout))
		return nil, nil, nil
	case err != nil:
		end()
		return nil, nil, err
	case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotFound ||
		resp.StatusCode/100 == 2 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		resp.Body.Close()
		end()
		return nil, nil, nil
	}
	// The line ends with the session's context (stop stays set), and
	// when the stream ends (its ended channel, closed by stream).
	return line, resp, nil
}

// streamOpenTimeout bounds the wait for the answer to a stream's request
// (a variable for tests).
var streamOpenTimeout = 30 * time.Second

var errNoStreamAnswer = errors.New("no answer to the stream's request in time")

// streamClient is hc for the assignment stream: its connections are not
// kept for other requests and it takes none kept by them. A kept one the
// server closed meanwhile (it restarted) fails once the request is
// written, and net/http then waits for the stream's body to end.
func streamClient(hc *http.Client) *http.Client {
	tr, ok := hc.Transport.(*http.Transport)
	if hc.Transport == nil {
		tr, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok {
		return hc
	}
	tr = tr.Clone()
	tr.DisableKeepAlives = true
	c := *hc
	c.Transport = tr
	return &c
}

// openStream opens the assignment stream: with POST and body, the
// heartbeats' (nil: with GET).
func (a *agent) openStream(ctx context.Context, body io.Reader) (*http.Response, error) {
	method, ctype := http.MethodPost, "application/x-ndjson"
	if body == nil {
		method, ctype = http.MethodGet, ""
	}
	req, err := a.client.newRequest(ctx, method, "/v1/agent/stream", body, ctype)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	return a.streams.Do(req)
}

// The agent opens its assignment stream with POST, and the request's body
// carries its heartbeats, one JSON api.AgentHeartbeat a line; the server
// answers each on the stream, in order, with a beat event (the
// api.AgentHeartbeatReply a heartbeat request gets) or a beat_error event
// (the api.Problem it would get). A heartbeat by request cost the server
// about twice as much. Heartbeats go by request while no such stream is
// up: between sessions, with a server that takes the stream only with GET
// (older servers answer 405), and for the rest of a session once a
// heartbeat on its stream went unanswered. An answer counts as contact
// with the server (fenceLoop) as a request's does. The line itself is
// package beatline, which the benchmark's simulated agents share.

// streamBeats is the current stream as it carries heartbeats.
type streamBeats struct {
	mu  sync.Mutex
	cur *beatline.Line // nil: heartbeats go by request
}

// line is the stream that carries heartbeats now, or nil.
func (s *streamBeats) line() *beatline.Line {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// set makes l the line heartbeats go on (nil: by request). A line that
// is no longer current stays off until the next stream.
func (s *streamBeats) set(l *beatline.Line) {
	s.mu.Lock()
	s.cur = l
	s.mu.Unlock()
}

// drop stops sending heartbeats on l, if it is current.
func (s *streamBeats) drop(l *beatline.Line) {
	s.mu.Lock()
	if s.cur == l {
		s.cur = nil
	}
	s.mu.Unlock()
}

// sendBeat sends heartbeat hb, on the stream while one carries them, else
// (or when the stream ends before it answers) by request. Once a
// heartbeat on the stream went unanswered, the rest of the session's go
// by request.
func (a *agent) sendBeat(ctx context.Context, hb api.AgentHeartbeat) (api.AgentHeartbeatReply, error) {
	if l := a.beats.line(); l != nil {
		reply, err := l.Send(ctx, hb)
		var ae *beatline.AnswerError
		switch {
		case err == nil:
			return reply, nil
		case errors.As(err, &ae):
			return reply, &statusError{Code: ae.Status, Body: ae.Detail}
		case !errors.Is(err, beatline.ErrGone):
			a.beats.drop(l)
			return reply, err
		}
	}
	var reply api.AgentHeartbeatReply
	err := a.client.postJSON(ctx, "/v1/agent/heartbeat", hb, &reply)
	return reply, err
}
