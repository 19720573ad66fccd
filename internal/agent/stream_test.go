package agent

import (
	"testing"
	"time"
)

// beatCounts is how many heartbeats srv received on a stream and by
// request.
func beatCounts(srv *fakeServer) (onStream, byRequest int) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.streamBeats, srv.heartbeats - srv.streamBeats
}

// The agent sends its heartbeats on its stream (stream.go), none by
// request while the stream is up; with a server that takes the stream
// only with GET (an older one), it heartbeats by request.
func TestHeartbeatsRideTheStream(t *testing.T) {
	srv := newFakeServer(t)
	startAgent(t, srv, t.TempDir())
	_, req0 := beatCounts(srv) // the first may leave before the stream is up
	waitFor(t, 5*time.Second, "3 heartbeats on the stream", func() bool { s, _ := beatCounts(srv); return s >= 3 })
	if _, req := beatCounts(srv); req != req0 {
		t.Fatalf("%d heartbeats by request while the stream was up", req-req0)
	}

	// An older server.
	srv.mu.Lock()
	srv.getOnly = true
	srv.mu.Unlock()
	srv.drop <- struct{}{}
	s0, _ := beatCounts(srv)
	_, req0 = beatCounts(srv)
	waitFor(t, 5*time.Second, "2 heartbeats by request", func() bool { _, req := beatCounts(srv); return req >= req0+2 })
	if s, _ := beatCounts(srv); s > s0+1 { // one may have been on its way
		t.Fatalf("%d heartbeats on a stream the server took with GET", s-s0)
	}
	_, _, _, streams := srv.snapshot()
	if streams < 2 {
		t.Fatalf("%d streams: the agent did not open one with GET", streams)
	}
}

// TestStreamBehindABufferingProxy: behind a proxy that waits for a
// request's whole body before passing it on, a stream opened with POST is
// never answered. The agent then opens its stream with GET, and its
// heartbeats go by request: it gets its jobs.
func TestStreamBehindABufferingProxy(t *testing.T) {
	defer func(d time.Duration) { streamOpenTimeout = d }(streamOpenTimeout)
	streamOpenTimeout = 500 * time.Millisecond
	srv := newFakeServer(t)
	srv.buffersPOST = true
	startAgent(t, srv, t.TempDir())
	waitFor(t, 10*time.Second, "a stream opened with GET", func() bool { _, _, _, n := srv.snapshot(); return n >= 1 })
	_, req0 := beatCounts(srv)
	waitFor(t, 5*time.Second, "2 heartbeats by request", func() bool { _, req := beatCounts(srv); return req >= req0+2 })
	as := assignment("behind-the-proxy", "true")
	srv.push("assign", as)
	waitFor(t, 10*time.Second, "the pushed job's final status", func() bool { _, ok := srv.final(as.ID); return ok })
}
