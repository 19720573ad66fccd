package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ServerEvent is one server-sent event (the text/event-stream format).
type ServerEvent struct {
	// ID is the event's id field; per the SSE rules it carries over from
	// the previous event when an event has none.
	ID string
	// Type is the event field ("message" when absent).
	Type string
	// Data is the event's data lines joined by newlines.
	Data []byte
}

// EventReader reads server-sent events from a stream.
type EventReader struct {
	sc     *bufio.Scanner
	lastID string
}

// NewEventReader returns a reader of the events in r.
func NewEventReader(r io.Reader) *EventReader {
	sc := bufio.NewScanner(r)
	// Log lines and job documents can be long; allow up to 4 MiB per line.
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	return &EventReader{sc: sc}
}

// Next returns the next event, skipping comments (keep-alives) and empty
// events. It returns io.EOF at the end of the stream; an event cut off by
// the end of the stream is dropped, as the SSE rules say.
func (r *EventReader) Next() (ServerEvent, error) {
	var (
		ev      ServerEvent
		data    bytes.Buffer
		hasData bool
	)
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if !hasData {
				ev = ServerEvent{}
				continue
			}
			ev.ID = r.lastID
			if ev.Type == "" {
				ev.Type = "message"
			}
			ev.Data = bytes.Clone(data.Bytes())
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Type = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				r.lastID = value
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		return ServerEvent{}, err
	}
	return ServerEvent{}, io.EOF
}

// Log stream event types.
const (
	LogEventLine   = "log"
	LogEventStatus = "status"
	LogEventEnd    = "end"
)

// LogEvent is one item of a job's log stream.
type LogEvent struct {
	// Type is LogEventLine, LogEventStatus or LogEventEnd.
	Type string
	// Line is set for LogEventLine.
	Line LogLine
	// Job is set for LogEventStatus (and for LogEventEnd when the server
	// sent the final job with it).
	Job *Job
}

// StreamOptions tune StreamLogs.
type StreamOptions struct {
	// After is the last log line (Seq) already seen; the stream starts
	// after it. Zero starts at the first line.
	After int64
	// OnReconnect, when set, is called before each reconnection with the
	// error that ended the previous connection and the attempt number, so a
	// CLI can tell its user why the output paused.
	OnReconnect func(err error, attempt int)
	// MaxBackoff caps the wait between reconnections (default 5s).
	MaxBackoff time.Duration
}

// StreamLogs follows a job's log over server-sent events and calls fn for
// every log line and status change, in order. A dropped connection or a
// server restart is not an error: StreamLogs reconnects with Last-Event-ID
// so no line is lost or repeated. It returns nil after the server's "end"
// event (the job is terminal and every line was sent), the error of fn when
// fn fails, ctx's error when ctx ends, and an *Error when the server refuses
// the stream (for example 404 when the job does not exist).
func (c *Client) StreamLogs(ctx context.Context, ws, job string, opt StreamOptions, fn func(LogEvent) error) error {
	maxBackoff := opt.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 5 * time.Second
	}
	last := opt.After
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		got, err := c.streamOnce(ctx, ws, job, &last, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fnErr callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && !retryableStatus(apiErr.StatusCode) {
			return err
		}
		if got {
			// The connection made progress: start the backoff again.
			backoff = 250 * time.Millisecond
		}
		if opt.OnReconnect != nil {
			opt.OnReconnect(err, attempt)
		}
		// Jitter so that many clients do not reconnect in step after a
		// server restart.
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// callbackError marks an error returned by the caller's function, which
// ends the stream rather than causing a reconnection.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable ||
		code == http.StatusGatewayTimeout || code == http.StatusTooManyRequests || code == http.StatusInternalServerError
}

// streamOnce holds one SSE connection. It reports whether any event arrived
// and returns nil only after the "end" event.
func (c *Client) streamOnce(ctx context.Context, ws, job string, last *int64, fn func(LogEvent) error) (got bool, err error) {
	req, err := c.newRequest(ctx, http.MethodGet, v1("workspaces", ws, "jobs", job, "logs"), nil, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return false, responseError(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, &Error{StatusCode: http.StatusNotAcceptable, Problem: Problem{
			Title: "Not Acceptable", Status: http.StatusNotAcceptable,
			Detail: fmt.Sprintf("job %s logs: server answered %q, not an event stream", job, mt),
		}}
	}
	r := NewEventReader(resp.Body)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return got, io.ErrUnexpectedEOF
		}
		if err != nil {
			return got, err
		}
		got = true
		var le LogEvent
		switch ev.Type {
		case LogEventLine:
			le.Type = LogEventLine
			if err := json.Unmarshal(ev.Data, &le.Line); err != nil {
				return got, fmt.Errorf("job %s logs: decoding line: %w", job, err)
			}
			if le.Line.Seq <= *last {
				continue // already delivered before a reconnection
			}
			*last = le.Line.Seq
		case LogEventStatus, LogEventEnd:
			le.Type = ev.Type
			if len(bytes.TrimSpace(ev.Data)) > 0 && ev.Data[0] == '{' {
				le.Job = new(Job)
				if err := json.Unmarshal(ev.Data, le.Job); err != nil {
					return got, fmt.Errorf("job %s logs: decoding %s event: %w", job, ev.Type, err)
				}
			}
		default:
			continue // unknown events are for newer clients
		}
		if err := fn(le); err != nil {
			return got, callbackError{err}
		}
		if le.Type == LogEventEnd {
			return got, nil
		}
	}
}
