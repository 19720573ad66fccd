package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// fakeServer is a programmable fake of the server side of the agent
// protocol (api/agent.go). The real server is being written in parallel,
// so the agent is tested against this small implementation; the lead's
// server tests cover the other side. It stores what the agent sends,
// dedups log lines by NodeSeq as the real store does, and can be made
// unavailable (every request answered 503 and the stream dropped) to play
// a server restart.
type fakeServer struct {
	t     *testing.T
	srv   *httptest.Server
	token string

	mu          sync.Mutex
	down        bool
	silent      chan struct{} // non-nil: requests get no answer until closed
	hellos      []api.AgentHello
	heartbeats  int
	refused     int  // requests answered 503 while down
	statusDown  bool // status reports answered 503, the rest served
	logs        map[string]map[int64]api.LogLine
	statuses    map[string][]api.AssignmentStatus
	artifacts   map[string][]byte
	welcome     api.AgentWelcome
	beats       []api.AgentHeartbeat     // every heartbeat received
	beatReply   *api.AgentHeartbeatReply // the answer to the next heartbeat (nil: 204)
	beatDelay   time.Duration            // how long each heartbeat waits for its answer
	beatTimes   []time.Time              // when each heartbeat arrived
	streamConns int
	// getOnly plays a server from before heartbeats on the stream: it
	// takes the stream only with GET (404 for POST, as the server's
	// catch-all route answers).
	getOnly bool
	// buffersPOST plays a proxy that passes a request on only once its
	// body ended (nginx's proxy_request_buffering, on by default): a
	// stream opened with POST, whose body is the heartbeats, is never
	// answered.
	buffersPOST bool
	// streamBeats counts the heartbeats received on a stream, of
	// heartbeats.
	streamBeats int

	events chan sseEvent
	drop   chan struct{}
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{
		t:         t,
		token:     "secret-token",
		logs:      map[string]map[int64]api.LogLine{},
		statuses:  map[string][]api.AssignmentStatus{},
		artifacts: map[string][]byte{},
		welcome:   api.AgentWelcome{HeartbeatSeconds: 1},
		events:    make(chan sseEvent, 16),
		drop:      make(chan struct{}, 1),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/agent/register", f.register)
	mux.HandleFunc("GET /v1/agent/stream", f.stream)
	mux.HandleFunc("POST /v1/agent/stream", f.stream)
	mux.HandleFunc("POST /v1/agent/heartbeat", f.heartbeat)
	mux.HandleFunc("POST /v1/agent/assignments/{id}/logs", f.postLogs)
	mux.HandleFunc("PUT /v1/agent/assignments/{id}/artifacts", f.putArtifacts)
	mux.HandleFunc("POST /v1/agent/assignments/{id}/status", f.postStatus)
	f.srv = httptest.NewServer(f.gate(mux))
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// gate checks the token and plays an unavailable server.
func (f *fakeServer) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		f.mu.Lock()
		down, silent := f.down, f.silent
		if down {
			f.refused++
		}
		f.mu.Unlock()
		if silent != nil {
			// A network partition: no answer at all (until the heal).
			select {
			case <-silent:
			case <-r.Context().Done():
			}
			http.Error(w, "partitioned", http.StatusServiceUnavailable)
			return
		}
		if down {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// setSilent makes the server answer nothing (a partition) or heals it.
func (f *fakeServer) setSilent(silent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case silent && f.silent == nil:
		f.silent = make(chan struct{})
		select {
		case f.drop <- struct{}{}:
		default:
		}
	case !silent && f.silent != nil:
		close(f.silent)
		f.silent = nil
	}
}

// setDown makes the server unavailable (dropping the stream) or available.
func (f *fakeServer) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
	if down {
		select {
		case f.drop <- struct{}{}:
		default:
		}
	}
}

func (f *fakeServer) register(w http.ResponseWriter, r *http.Request) {
	var h api.AgentHello
	if err := json.NewDecoder(r.Body).Decode(&h); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.hellos = append(f.hellos, h)
	welcome := f.welcome
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(welcome)
}

func (f *fakeServer) stream(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	getOnly, buffersPOST := f.getOnly, f.buffersPOST
	f.mu.Unlock()
	if r.Method == http.MethodPost && getOnly {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodPost && buffersPOST {
		_, _ = io.Copy(io.Discard, r.Body)
		return
	}
	// A POST's body carries heartbeats, each answered on the stream.
	answers := make(chan sseEvent, 16)
	if r.Method == http.MethodPost {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			f.t.Errorf("stream: %v", err)
			return
		}
		ctx := r.Context()
		go func() {
			sc := bufio.NewScanner(r.Body)
			for sc.Scan() {
				ev := sseEvent{Name: "beat_error", Data: `{"status": 400, "detail": "not a heartbeat"}`}
				var hb api.AgentHeartbeat
				if json.Unmarshal(sc.Bytes(), &hb) == nil {
					reply, _ := f.took(hb, true)
					b, _ := json.Marshal(reply)
					ev = sseEvent{Name: "beat", Data: string(b)}
				}
				select {
				case answers <- ev:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fmt.Fprint(w, ": hello\n\n")
	fl.Flush()
	f.mu.Lock()
	f.streamConns++
	f.mu.Unlock()
	for {
		select {
		case ev := <-f.events:
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Name, ev.Data)
			fl.Flush()
		case ev := <-answers:
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Name, ev.Data)
			fl.Flush()
		case <-f.drop:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// took records heartbeat hb, received on a stream or by request, waits
// beatDelay and returns its answer, and whether one was set (replyToBeat).
func (f *fakeServer) took(hb api.AgentHeartbeat, onStream bool) (api.AgentHeartbeatReply, bool) {
	f.mu.Lock()
	f.beatTimes = append(f.beatTimes, time.Now())
	delay := f.beatDelay
	f.mu.Unlock()
	time.Sleep(delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats++
	if onStream {
		f.streamBeats++
	}
	f.beats = append(f.beats, hb)
	var reply api.AgentHeartbeatReply
	if f.beatReply == nil {
		return reply, false
	}
	reply, f.beatReply = *f.beatReply, nil
	return reply, true
}

func (f *fakeServer) heartbeat(w http.ResponseWriter, r *http.Request) {
	var hb api.AgentHeartbeat
	if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	reply, answer := f.took(hb, false)
	if !answer {
		w.WriteHeader(http.StatusNoContent) // as a server from before heartbeat replies
		return
	}
	_ = json.NewEncoder(w).Encode(reply)
}

// replyToBeat answers the next heartbeat with reply.
func (f *fakeServer) replyToBeat(reply api.AgentHeartbeatReply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beatReply = &reply
}

func (f *fakeServer) postLogs(w http.ResponseWriter, r *http.Request) {
	var b api.LogBatch
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logs[id] == nil {
		f.logs[id] = map[int64]api.LogLine{}
	}
	for _, l := range b.Lines {
		f.logs[id][l.NodeSeq] = l
	}
}

func (f *fakeServer) putArtifacts(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.artifacts[r.PathValue("id")] = b
	f.mu.Unlock()
}

func (f *fakeServer) postStatus(w http.ResponseWriter, r *http.Request) {
	var st api.AssignmentStatus
	if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statusDown {
		http.Error(w, "restarting", http.StatusServiceUnavailable)
		return
	}
	f.statuses[r.PathValue("id")] = append(f.statuses[r.PathValue("id")], st)
}

// push sends an event on the current (or next) stream.
func (f *fakeServer) push(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		f.t.Fatal(err)
	}
	f.events <- sseEvent{Name: name, Data: string(b)}
}

// final returns the assignment's terminal status, if reported.
func (f *fakeServer) final(id string) (api.AssignmentStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.statuses[id] {
		if api.JobTerminal(st.Status) {
			return st, true
		}
	}
	return api.AssignmentStatus{}, false
}

// lines returns the stored lines of an assignment ordered by NodeSeq.
func (f *fakeServer) lines(id string) []api.LogLine {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.LogLine
	for _, l := range f.logs[id] {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b api.LogLine) int { return int(a.NodeSeq - b.NodeSeq) })
	return out
}

func (f *fakeServer) snapshot() (hellos []api.AgentHello, heartbeats, refused, streams int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hellos), f.heartbeats, f.refused, f.streamConns
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
