// Package beatline carries an agent's heartbeats on its assignment
// stream. The agent opens the stream with POST; the request's body
// carries its heartbeats, one JSON api.AgentHeartbeat a line, and the
// server answers each on the stream, in order, with a beat event (the
// api.AgentHeartbeatReply a heartbeat request gets) or a beat_error event
// (the api.Problem it would get). The agent (internal/agent) and the
// benchmark's simulated agents (internal/tidetest/simagent) both send
// them through this package, so that what the benchmark measures is what
// agents send.
package beatline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/tideml/tide/api"
)

// Line is one stream's heartbeats.
type Line struct {
	body    *io.PipeReader
	w       *io.PipeWriter
	answers chan answer
	ended   chan struct{}
	endOnce sync.Once
}

type answer struct {
	reply api.AgentHeartbeatReply
	err   error
}

// New returns the heartbeats' line of a stream about to be opened.
func New() *Line {
	r, w := io.Pipe()
	return &Line{body: r, w: w, answers: make(chan answer, 4), ended: make(chan struct{})}
}

// Body is the stream request's body.
func (l *Line) Body() io.Reader { return l.body }

// Close ends the request's body, with err (nil: as a body ends). net/http
// writes a request's body while it waits for the answer and, should the
// connection fail first, waits for the body to end before it returns the
// error: the body is ended when the session ends, and when no answer
// came in time.
func (l *Line) Close(err error) {
	if err == nil {
		l.w.Close()
		return
	}
	l.w.CloseWithError(err)
}

// End says the stream ended: the heartbeat waiting for an answer, and
// those sent later, get ErrGone.
func (l *Line) End() { l.endOnce.Do(func() { close(l.ended) }) }

// ErrGone says a heartbeat could not be sent on, or was not answered by,
// a stream that ended: it goes by request.
var ErrGone = errors.New("the assignment stream ended")

// AnswerError is the answer to a heartbeat that failed: a beat_error
// event's problem, or (Status 200) a beat event that could not be read.
type AnswerError struct {
	Status int
	Detail string
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("heartbeat on the assignment stream: HTTP %d: %s", e.Status, e.Detail)
}

// Answer hands the data of a beat or beat_error event (name) to the
// heartbeat waiting for it; none waits when it gave up.
func (l *Line) Answer(name, data string) {
	var ans answer
	if name == "beat" {
		if err := json.Unmarshal([]byte(data), &ans.reply); err != nil {
			ans.err = &AnswerError{Status: 200, Detail: "undecodable heartbeat answer: " + err.Error()}
		}
	} else {
		var p api.Problem
		_ = json.Unmarshal([]byte(data), &p)
		ans.err = &AnswerError{Status: p.Status, Detail: p.Detail}
	}
	select {
	case l.answers <- ans:
	default: // no heartbeat waits for it: it gave up
	}
}

// Send sends hb on l and waits for its answer. It returns ErrGone when
// the stream ended first, and ctx's error when ctx ended first: the
// stream then carries no more heartbeats (a late answer would be taken
// for the next one's), and one whose connection took nothing in time is
// stuck: its body is ended.
func (l *Line) Send(ctx context.Context, hb api.AgentHeartbeat) (api.AgentHeartbeatReply, error) {
	frame, err := json.Marshal(hb)
	if err != nil {
		return api.AgentHeartbeatReply{}, err
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := l.w.Write(append(frame, '\n'))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			return api.AgentHeartbeatReply{}, ErrGone
		}
	case <-l.ended:
		return api.AgentHeartbeatReply{}, ErrGone
	case <-ctx.Done():
		l.w.CloseWithError(ctx.Err())
		return api.AgentHeartbeatReply{}, ctx.Err()
	}
	select {
	case ans := <-l.answers:
		return ans.reply, ans.err
	case <-l.ended:
		return api.AgentHeartbeatReply{}, ErrGone
	case <-ctx.Done():
		return api.AgentHeartbeatReply{}, ctx.Err()
	}
}
