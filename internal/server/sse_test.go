package server

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A client that stays connected but stops reading is dropped once a write
// has waited sseWriteTimeout (its socket buffers full), instead of holding
// the handler.
func TestSSEDropsAClientThatStopsReading(t *testing.T) {
	old := sseWriteTimeout
	sseWriteTimeout = 300 * time.Millisecond
	t.Cleanup(func() { sseWriteTimeout = old })
	ended := make(chan error, 1)
	big := strings.Repeat("x", 64<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := startSSE(w)
		for {
			if err := out.send("log", "", big); err != nil {
				ended <- err
				return
			}
		}
	}))
	defer srv.Close()

	// A reader that never reads.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"))
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("the stream ended with %v, want a write timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler is still writing to a client that stopped reading")
	}
}
