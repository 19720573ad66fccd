package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/tideml/tide/internal/controller"
)

// agentKeepAlive is how often an idle assignment stream sends a comment:
// a third of the agent's StreamIdleTimeout (60 s), after which it takes
// the stream for dead. Each costs a write: at 10,000 nodes, every 10 s
// was a tenth of the server's CPU while they idled.
const agentKeepAlive = 20 * time.Second

// An agent's assignment stream lasts as long as its agent, so a server
// holds one per node. Served by net/http's handler, each held the
// goroutine serving its connection (its stack grown by the middleware and
// the first store read: about 20 KB), a goroutine reading in the
// background and 10 KB of buffers; at 10,000 nodes that was 400 MB of the
// server's 1.3 GB, and scanning their stacks a tenth of its CPU. So the
// stream takes its connection over once the agent is authenticated
// (Hijack): a small goroutine follows the node's messages and writes each
// event with one write, another waits for the connection to close, and
// net/http's goroutine and buffers go. Where the connection cannot be
// taken over (HTTP/2), the handler serves the stream itself.

// agentEvents writes an agent stream's events.
type agentEvents interface {
	send(event, id string, v any) error
	keepAlive() error
}

// agentStream holds an agent's connection: assignments and cancels are
// pushed the moment the controller decides them.
func (s *Server) agentStream(w http.ResponseWriter, r *http.Request) {
	node := principalOf(r).node
	runtime := s.runtimeOf(r.Context(), node)
	sub := s.hub.Subscribe(node)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		defer s.hub.Unsubscribe(node, sub)
		out, ok := startSSE(w)
		if !ok {
			return
		}
		s.followNode(r.Context(), node, runtime, sub, out)
		return
	}
	// The request's context ends when this handler returns; the stream's
	// keeps its values (the principal) and ends when the agent hangs up.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	out := &rawEvents{conn: conn}
	_ = conn.SetDeadline(time.Time{}) // net/http's read deadline for the request's headers
	if err := out.header(); err != nil {
		cancel()
		s.hub.Unsubscribe(node, sub)
		_ = conn.Close()
		return
	}
	go func() {
		// An agent sends nothing on its stream: a read returns when the
		// connection closes.
		var b [64]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				cancel()
				return
			}
		}
	}()
	go func() {
		defer conn.Close()
		defer cancel()
		defer s.hub.Unsubscribe(node, sub)
		defer func() {
			// Out of net/http's handler, a panic would take the server
			// down with every other stream: it ends this one only, as
			// wrap ends a request.
			if v := recover(); v != nil {
				s.log.Error("panic in agent stream", "node", node, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		s.followNode(ctx, node, runtime, sub, out)
	}()
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
				return
			}
			// A slow agent may have missed pushes while its channel was
			// full: once caught up, it gets what the store holds.
			if len(sub) == 0 && s.hub.Missed(sub) && sendPending() != nil {
				return
			}
		case <-keepalive.C:
			if out.keepAlive() != nil {
				return
			}
		}
	}
}

// rawEvents writes server-sent events on a connection taken over from
// net/http: the response's body is the events until the connection
// closes. Each event is one write, bounded by sseWriteTimeout.
type rawEvents struct {
	conn net.Conn
}

func (e *rawEvents) write(b []byte) error {
	_ = e.conn.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	_, err := e.conn.Write(b)
	return err
}

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

// keepAliveEvent is built once: every stream sends one every 20 s.
var keepAliveEvent = []byte(": keep-alive\n\n")

func (e *rawEvents) keepAlive() error { return e.write(keepAliveEvent) }
