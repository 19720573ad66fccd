package server

import (
	"strings"
	"testing"
)

// A node's token is checked against the cached one (nodeTokenCache) as
// against the HMAC: the right token passes before and after it is cached,
// a forged or another node's never, and the cache keeps only tokens that
// passed.
func TestNodeTokensCachedOnlyOnceVerified(t *testing.T) {
	s := &Server{nodeKey: []byte("a key of the server")}
	good := s.nodeToken("n1")
	forged := good[:len(good)-4] + "0000"
	if strings.HasSuffix(good, "0000") {
		forged = good[:len(good)-4] + "1111"
	}
	other := s.nodeToken("n2")
	check := func(secret, wantID string, want bool) {
		t.Helper()
		id, ok := s.checkNodeToken(secret)
		if ok != want || (want && id != wantID) {
			t.Fatalf("checkNodeToken(%q) = %q, %v; want %q, %v", secret, id, ok, wantID, want)
		}
	}
	check(forged, "n1", false)
	if _, cached := s.nodeTokens.get("n1"); cached {
		t.Fatal("a forged token was cached")
	}
	check(good, "n1", true)
	if tok, cached := s.nodeTokens.get("n1"); !cached || tok != good {
		t.Fatalf("the verified token is not cached: %q %v", tok, cached)
	}
	check(good, "n1", true)
	check(forged, "n1", false)
	check("node.n2."+good[len("node.n1."):], "n2", false) // n1's MAC for n2
	check(other, "n2", true)
	check("node.n1", "", false)
	check("admin-token", "", false)
}
