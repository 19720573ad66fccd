package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/controller"
)

// agentKeepAlive is how often an idle assignment stream sends a comment:
// a third of the agent's StreamIdleTimeout (60 s), after which it takes
// the stream for dead. Each costs a write: at 10,000 nodes, every 10 s
// was a tenth of the server's CPU while they idled. A stream that wrote
// anything since the last tick (the answers to the heartbeats it
// carries) sends none: at 10,000 nodes heartbeating on their streams the
// keep-alives were 7 % of the server's CPU, a third of its writes. The
// longest silence is then two periods, 40 s.
const agentKeepAlive = 20 * time.Second

// An agent's assignment stream lasts as long as its agent, so a server
// holds one per node. Served by net/http's handler, each held the
// goroutine serving its connection (its stack grown by the middleware and
// the first store read: about 20 KB), a goroutine reading in the
// background and 10 KB of buffers; at 10,000 nodes that was 400 MB of the
// server's 1.3 GB, and scanning their stacks a tenth of its CPU. So the
// stream takes its connection over once the agent is authenticated
// (Hijack): a small goroutine follows the node's messages and writes each
// event with one write, another reads the heartbeats the agent sends on
// it (agentbeats.go) and then waits for the connection to close, and
// net/http's goroutine and buffers go. Where the connection cannot be
// taken over (HTTP/2), the handler serves the stream itself.

// agentEvents writes an agent stream's events. Both goroutines of a
// stream write (its messages, and the answers to the heartbeats it
// carries): each call writes one whole event.
type agentEvents interface {
	send(event, id string, v any) error
	write(b []byte) error
	// wrote is when the last write that succeeded began.
	wrote() time.Time
}

// agentStream holds an agent's connection: assignments and cancels are
// pushed the moment the controller decides them. Opened with POST, the
// request's body carries the agent's heartbeats, each answered on the
// stream (agentbeats.go); opened with GET (older agents), it
// carries nothing and they heartbeat by request.
func (s *Server) agentStream(w http.ResponseWriter, r *http.Request) {
	node := principalOf(r).node
	runtime := s.runtimeOf(r.Context(), node)
	sub := s.hub.Subscribe(node)
	s.deliverAsks(node) // SSH requests that came before the stream
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.serveAgentStream(w, r, node, runtime, sub)
		return
	}
	// The request's context ends when this handler returns; the stream's
	// keeps its values (the principal) and ends when the agent hangs up.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	out := &rawEvents{conn: conn}
	body := hijackedBody(r, brw.Reader, conn)
	_ = conn.SetDeadline(time.Time{}) // net/http's read deadline for the request's headers
	if err := out.header(); err != nil {
		cancel()
		s.endStream(node, sub)
		_ = conn.Close()
		return
	}
	// What the heartbeats' errors are logged with: the request itself
	// would keep net/http's buffers and connection state for as long as
	// the stream lasts (8 KB and more a stream).
	named := &http.Request{Method: r.Method, URL: r.URL}
	go func() {
		defer cancel()
		defer s.recoverStream(node)
		s.readBeats(ctx, named, node, body, out)
		// The agent sends nothing more: a read returns when the
		// connection closes.
		var b [64]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				return
			}
		}
	}()
	go func() {
		defer conn.Close()
		defer cancel()
		defer s.endStream(node, sub)
		defer s.recoverStream(node)
		s.followNode(ctx, node, runtime, sub, out)
	}()
}

// recoverStream, deferred, ends a stream's goroutine that panicked. Out
// of net/http's handler, a panic would take the server down with every
// other stream: it ends this one only, as wrap ends a request.
func (s *Server) recoverStream(node string) {
	if v := recover(); v != nil {
		s.log.Error("panic in agent stream", "node", node, "panic", v, "stack", string(debug.Stack()))
	}
}

// serveAgentStream serves a stream whose connection cannot be taken over
// (HTTP/2) from the handler, as net/http's other streams. HTTP/2 reads a
// request's body while the answer is written, so the heartbeats it
// carries are answered as on a taken-over connection.
func (s *Server) serveAgentStream(w http.ResponseWriter, r *http.Request, node, runtime string, sub chan controller.Message) {
	defer s.endStream(node, sub)
	events, ok := startSSE(w)
	if !ok {
		return
	}
	out := &lockedEvents{out: events}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	read := make(chan struct{})
	if r.ProtoMajor >= 2 {
		go func() {
			defer close(read)
			s.readBeats(ctx, r, node, r.Body, out)
		}()
	} else {
		close(read) // HTTP/1 reads no body while it answers: the agent's heartbeats go unanswered, and by request
	}
	s.followNode(ctx, node, runtime, sub, out)
	out.end()
	cancel()
	_ = r.Body.Close() // the reading goroutine's Read returns
	<-read
}

// lockedEvents lets the two goroutines of a stream served from its
// handler write (net/http's ResponseWriter is not safe for that), until
// the handler ends it.
type lockedEvents struct {
	mu    sync.Mutex
	out   *sse
	ended bool
	last  time.Time // wrote's
}

func (l *lockedEvents) wrote() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

var errStreamEnded = errors.New("the agent stream ended")

func (l *lockedEvents) send(event, id string, v any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return errStreamEnded
	}
	now := time.Now()
	err := l.out.send(event, id, v)
	if err == nil {
		l.last = now
	}
	return err
}

func (l *lockedEvents) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return errStreamEnded
	}
	now := time.Now()
	err := l.out.write(b)
	if err == nil {
		l.last = now
	}
	return err
}

func (l *lockedEvents) end() {
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
}

// endStream ends node's stream sub. The store holds what its messages
// said, and the next stream sends it, except SSH requests: those it had
// not sent are kept for the next stream.
func (s *Server) endStream(node string, sub chan controller.Message) {
	s.hub.Unsubscribe(node, sub)
	for {
		select {
		case ev := <-sub:
			s.keepUnsent(node, ev)
			continue
		default:
		}
		break
	}
	// The agent's next stream may have connected already (it reconnected
	// before this one noticed its end): it gets them now.
	if s.hub.Connected(node) {
		s.deliverAsks(node)
	}
}

// keepUnsent keeps an SSH request a stream of node could not send, for
// the next one (an agent reconnecting while a client waits).
func (s *Server) keepUnsent(node string, ev controller.Message) {
	if open, ok := ev.Data.(api.SSHOpen); ok && ev.Kind == "ssh" {
		s.keepAsk(open.ID, node, func() { s.hub.Deliver(node, ev) })
	}
}

// followNode sends what the store holds for node, then every message
// the controller pushes to it (sub), until ctx ends, the server stops or
// a write fails.
func (s *Server) followNode(ctx context.Context, node, runtime string, sub chan controller.Message, out agentEvents) {
	// sendPending sends what the store holds for the node; the agent
	// ignores an assignment or a cancel it already has.
	sendPending := func() error {
		assign, cancel, err := s.svc.Pending(ctx, node, runtime)
		if err != nil {
			return err
		}
		if assign != nil {
			if err := out.send("assign", "", assign); err != nil {
				return err
			}
		}
		if cancel != nil {
			return out.send("cancel", "", cancel)
		}
		return nil
	}
	if sendPending() != nil {
		return
	}
	keepalive := time.NewTicker(agentKeepAlive)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		case ev := <-sub:
			if ev.Kind == controller.KindSync {
				s.hub.Missed(sub) // the store is read now
				if sendPending() != nil {
					return
				}
				continue
			}
			if out.send(ev.Kind, "", ev.Data) != nil {
				s.keepUnsent(node, ev)
				return
			}
			// A slow agent may have missed pushes while its channel was
			// full: once caught up, it gets what the store holds.
			if len(sub) == 0 && s.hub.Missed(sub) && sendPending() != nil {
				return
			}
		case now := <-keepalive.C:
			if keepAlive(out, now) != nil {
				return
			}
		}
	}
}

// rawEvents writes server-sent events on a connection taken over from
// net/http: the response's body is the events until the connection
// closes. Each event is one write, bounded by sseWriteTimeout; a
// net.Conn writes each call's bytes whole, so the stream's two
// goroutines need no lock.
type rawEvents struct {
	conn net.Conn
	last atomic.Int64 // wrote's, Unix nanoseconds
}

func (e *rawEvents) write(b []byte) error {
	now := time.Now()
	_ = e.conn.SetWriteDeadline(now.Add(sseWriteTimeout))
	_, err := e.conn.Write(b)
	if err == nil {
		e.last.Store(now.UnixNano())
	}
	return err
}

func (e *rawEvents) wrote() time.Time { return time.Unix(0, e.last.Load()) }

// header writes the response's status line and headers (what startSSE
// sets); the body ends when the connection closes.
func (e *rawEvents) header() error {
	return e.write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n"))
}

func (e *rawEvents) send(event, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.write(appendEvent(make([]byte, 0, len(id)+len(event)+len(data)+32), event, id, data))
}

// keepAlive writes a keep-alive on out at now, its keep-alive tick,
// unless out wrote since the last tick.
func keepAlive(out agentEvents, now time.Time) error {
	if now.Sub(out.wrote()) < agentKeepAlive {
		return nil
	}
	return out.write(keepAliveEvent)
}

// keepAliveEvent is built once: a silent stream sends one every 20 s.
var keepAliveEvent = []byte(": keep-alive\n\n")
