package server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// An agent that opens its stream with POST sends its heartbeats in the
// request's body, one JSON api.AgentHeartbeat a line, and each is
// answered on the stream, in order, by a beat event (its
// api.AgentHeartbeatReply) or a beat_error event (an api.Problem, as the
// heartbeat request's error). At 2,000 nodes a heartbeat by request cost
// 124-143 µs of the server's CPU, much of it HTTP's: reading and parsing
// the request, authenticating its token, routing, measuring and writing
// the answer. On the stream, the agent was authenticated when it opened,
// and a heartbeat costs a read, its decoding, the same Service.Heartbeat
// and one write: 83-96 µs. What a heartbeat records, and when it is written to the
// store and answered, is the request's: both call Server.beat.

// beatAnswered is the answer to most heartbeats, built once.
var beatAnswered = appendEvent(nil, "beat", "", []byte("{}"))

// hijackedBody is the body of request r, whose connection conn was taken
// over from net/http: first what net/http had read of it (buffered), then
// the connection. It ends with the body: at once for a GET.
func hijackedBody(r *http.Request, buffered *bufio.Reader, conn net.Conn) io.Reader {
	var raw io.Reader = conn
	if n := buffered.Buffered(); n > 0 {
		b, _ := buffered.Peek(n)
		raw = io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn)
	}
	switch {
	case slices.Contains(r.TransferEncoding, "chunked"):
		// A small buffer for the chunks' sizes: 10,000 streams hold one.
		return httputil.NewChunkedReader(bufio.NewReaderSize(raw, 512))
	case r.ContentLength > 0:
		return io.LimitReader(raw, r.ContentLength)
	}
	return bytes.NewReader(nil)
}

// readBeats answers on out each heartbeat node's agent sends in body,
// until body ends or out fails. r is the stream's request.
func (s *Server) readBeats(ctx context.Context, r *http.Request, node string, body io.Reader, out agentEvents) {
	br := bufio.NewReaderSize(body, 1024)
	var long []byte // a line longer than br's buffer, so far
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if long = append(long, line...); len(long) > maxBody {
				p, _ := s.problemOf(r, &service.Error{Status: 413, Code: "RequestTooLarge", Msg: "a heartbeat on the agent stream is longer than the request body limit"})
				_ = out.send("beat_error", "", p)
				return
			}
			continue
		}
		if err != nil {
			return
		}
		if long != nil {
			line, long = append(long, line...), nil
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		// The usual heartbeat (what agents send, saying nothing new) is
		// read field by field (beatjson.go) and answered from memory or
		// after its batch's write (Service.Heartbeat), all of it on a
		// small stack: this goroutine answers it. A goroutine of its own
		// answers any other (json.Unmarshal, the store reads an answer
		// with a cancel or an assignment needs, a problem's encoding grow
		// a goroutine's stack to several KB, and a stream's reader keeps
		// its stack while it waits for the next heartbeat: at 10,000
		// streams, 150 MB); the reader waits for it (one at a time, in
		// order).
		var hb api.AgentHeartbeat
		var beat service.Beat
		read := (&beatScan{b: line}).heartbeat(&hb)
		if read {
			beat, err = s.svc.Heartbeat(ctx, node, hb)
			if err == nil && !beat.Missing && beat.Cancel == nil {
				if out.write(beatAnswered) != nil {
					return
				}
				continue
			}
		}
		if s.answerAside(ctx, r, node, line, read, hb, beat, err, out) != nil {
			return
		}
	}
}

// answerAside answers, on a goroutine of its own, a heartbeat the reader
// did not (line, read into hb, recorded as beat or refused with err when
// read), and waits for it. Its own function, so that what the reader
// decodes stays on the reader's stack (captured by the goroutine, hb and
// beat went to the heap on every heartbeat: 5 % of the server's CPU).
func (s *Server) answerAside(ctx context.Context, r *http.Request, node string, line []byte, read bool, hb api.AgentHeartbeat, beat service.Beat, err error, out agentEvents) error {
	answered := make(chan error, 1)
	go func() {
		werr := errStreamEnded // should it panic
		defer func() { answered <- werr }()
		defer s.recoverStream(node)
		if !read {
			if err = decodeBeat(line, &hb); err != nil {
				err = &service.Error{Status: 400, Code: api.CodeBadRequest, Msg: "heartbeat on the agent stream: " + err.Error()}
			} else {
				beat, err = s.svc.Heartbeat(ctx, node, hb)
			}
		}
		werr = s.answerBeat(ctx, r, node, beat, err, out)
	}()
	return <-answered
}

// answerBeat writes the answer to a heartbeat of node that Service.Heartbeat
// recorded as beat, or refused with err.
func (s *Server) answerBeat(ctx context.Context, r *http.Request, node string, beat service.Beat, err error, out agentEvents) error {
	var reply api.AgentHeartbeatReply
	if err == nil {
		reply, err = s.beatReply(ctx, node, beat)
	}
	switch {
	case err != nil:
		p, _ := s.problemOf(r, err)
		return out.send("beat_error", "", p)
	case reply.Cancel == nil && reply.Assign == nil:
		return out.write(beatAnswered)
	}
	return out.send("beat", "", reply)
}
