package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	f  http.Flusher
	rc *http.ResponseController
}

// sseWriteTimeout bounds each write of an event stream: a client (an
// agent, a browser) that stays connected but stops reading is dropped,
// instead of holding its handler until TCP gives up. Keep-alives are
// written every 10-15 s, so a reading client never waits this long.
var sseWriteTimeout = 30 * time.Second // a variable for tests

// deadline arms the write deadline for the next write (net/http clears
// it when the handler returns). A writer without deadlines just writes.
func (s *sse) deadline() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(200)
	f.Flush()
	return &sse{w: w, f: f, rc: http.NewResponseController(w)}, true
}

func (s *sse) send(event, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(appendEvent(nil, event, id, data))
}

// sendRaw sends a JSON document as one event (compacted: an event's
// data is one line).
func (s *sse) sendRaw(event string, data []byte) error {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return err
	}
	return s.write(appendEvent(nil, event, "", b.Bytes()))
}

// write writes one event, or comment, and flushes it.
func (s *sse) write(b []byte) error {
	s.deadline()
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// appendEvent appends to b the event named event with id (none when "")
// and data (one line of JSON).
func appendEvent(b []byte, event, id string, data []byte) []byte {
	if id != "" {
		b = append(append(append(b, "id: "...), id...), '\n')
	}
	b = append(append(append(b, "event: "...), event...), "\ndata: "...)
	return append(append(b, data...), "\n\n"...)
}

func (s *sse) comment(text string) error {
	return s.write([]byte(": " + text + "\n\n"))
}

// complete reports whether every rank of a terminal job has reported its
// last log line and all of them are stored.
func logsComplete(j *api.Job, lastSeq int64) bool {
	if !api.JobTerminal(j.Status) {
		return false
	}
	var want int64
	for _, r := range j.Ranks {
		want += r.LastNodeSeq
	}
	return lastSeq >= want
}

// jobLogs serves a job's log: JSON by default, or server-sent events that
// follow the job until it ends and every line was sent.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request) {
	ws, name := r.PathValue("workspace"), r.PathValue("name")
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		after, _ = strconv.ParseInt(v, 10, 64)
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, _ = strconv.ParseInt(v, 10, 64)
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		lines, _, err := s.svc.Logs(r.Context(), ws, name, after, 10000)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, 200, list(lines))
		return
	}
	if _, err := s.svc.Job(r.Context(), ws, name); err != nil {
		s.fail(w, r, err)
		return
	}
	out, ok := startSSE(w)
	if !ok {
		s.fail(w, r, fmt.Errorf("streaming unsupported"))
		return
	}
	lastStatus := ""
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	grace := time.Time{}
	for {
		wake := s.changes.Wait()
		lines, j, err := s.svc.Logs(r.Context(), ws, name, after, 1000)
		if err != nil {
			return
		}
		for _, l := range lines {
			if out.send("log", strconv.FormatInt(l.Seq, 10), l) != nil {
				return
			}
			after = l.Seq
		}
		if len(lines) == 1000 {
			continue
		}
		if j.Status != lastStatus || j.PendingReason != "" {
			if j.Status != lastStatus {
				if out.send("status", "", j) != nil {
					return
				}
			}
			lastStatus = j.Status
		}
		if api.JobTerminal(j.Status) {
			// Lines may still be in flight from an agent; wait for them, but
			// not forever (an agent that died never sends them).
			if grace.IsZero() {
				grace = time.Now().Add(5 * time.Second)
			}
			if logsComplete(j, after) || time.Now().After(grace) {
				_ = out.send("end", "", j)
				return
			}
		}
		timer := time.NewTimer(time.Second)
		select {
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-wake:
		case <-timer.C:
		case <-keepalive.C:
			if out.comment("keep-alive") != nil {
				timer.Stop()
				return
			}
		}
		timer.Stop()
	}
}

func (s *Server) agentRegister(w http.ResponseWriter, r *http.Request) {
	var h api.AgentHello
	b, err := readBody(r)
	if err == nil {
		err = decodeStrict(b, &h)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	node := principalOf(r).node
	if h.NodeID != "" && h.NodeID != node {
		writeProblem(w, &api.Problem{Status: 403, Code: "Forbidden", Detail: fmt.Sprintf("token belongs to node %s, not %s", node, h.NodeID)})
		return
	}
	welcome, err := s.svc.Register(r.Context(), node, h)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, welcome)
}

func (s *Server) agentHeartbeat(w http.ResponseWriter, r *http.Request) {
	var hb api.AgentHeartbeat
	b, err := readBody(r)
	if err == nil && len(b) > 0 {
		err = decodeBeat(b, &hb)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply, err := s.beat(r.Context(), principalOf(r).node, hb)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if reply.Cancel == nil && reply.Assign == nil {
		// Most heartbeats: nothing to do.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}\n"))
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

// beat records heartbeat hb of node and answers it, whether it came as a
// request (agentHeartbeat) or on the node's assignment stream
// (agentbeats.go): the assignments the agent must stop, and the one it
// must run when it runs nothing while the store gives its node a job.
func (s *Server) beat(ctx context.Context, node string, hb api.AgentHeartbeat) (api.AgentHeartbeatReply, error) {
	beat, err := s.svc.Heartbeat(ctx, node, hb)
	if err != nil {
		return api.AgentHeartbeatReply{}, err
	}
	return s.beatReply(ctx, node, beat)
}

// beatReply is the answer to a heartbeat of node that Service.Heartbeat
// recorded as beat.
func (s *Server) beatReply(ctx context.Context, node string, beat service.Beat) (api.AgentHeartbeatReply, error) {
	if !beat.Missing {
		return api.AgentHeartbeatReply{Cancel: beat.Cancel}, nil
	}
	// (A cancel Pending finds is for an assignment the agent does not
	// run: nothing to stop.)
	assign, _, err := s.svc.Pending(ctx, node, s.runtimeOf(ctx, node))
	return api.AgentHeartbeatReply{Cancel: beat.Cancel, Assign: assign}, err
}

func (s *Server) agentLogs(w http.ResponseWriter, r *http.Request) {
	var b api.LogBatch
	body, err := readBody(r)
	if err == nil {
		err = decodeStrict(body, &b)
	}
	if err == nil {
		err = s.svc.AppendLogs(r.Context(), principalOf(r).node, r.PathValue("id"), b.Lines)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.changes.Notify()
	w.WriteHeader(204)
}

func (s *Server) agentStatus(w http.ResponseWriter, r *http.Request) {
	var st api.AssignmentStatus
	body, err := readBody(r)
	if err == nil {
		err = decodeStrict(body, &st)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st.ID = r.PathValue("id")
	if err := s.svc.ReportStatus(r.Context(), principalOf(r).node, st); err != nil {
		s.fail(w, r, err)
		return
	}
	s.changes.Notify()
	w.WriteHeader(204)
}
