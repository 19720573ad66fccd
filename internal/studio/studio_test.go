package studio

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestCookieRefused(t *testing.T) {
	s := New([]byte("key"), nil)
	const token = "tok"
	req := func(method, origin, csrf string) *http.Request {
		r := httptest.NewRequest(method, "http://tide.example:7430/v1/x", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if csrf != "" {
			r.Header.Set(CSRFHeader, csrf)
		}
		return r
	}
	good := s.CSRFToken(token)
	for _, c := range []struct {
		name    string
		r       *http.Request
		app     bool
		refused bool
	}{
		{"API GET", req("GET", "", ""), false, false},
		{"API POST without CSRF", req("POST", "http://tide.example:7430", ""), false, true},
		{"API POST with wrong CSRF", req("POST", "", "nope"), false, true},
		{"API POST with CSRF", req("POST", "", good), false, false},
		{"app GET, no Origin (a link followed)", req("GET", "", ""), true, false},
		{"app GET from another site (WebSocket handshake)", req("GET", "http://evil.example", ""), true, true},
		{"app GET same origin (WebSocket handshake)", req("GET", "http://tide.example:7430", ""), true, false},
		{"app POST same origin", req("POST", "http://tide.example:7430", ""), true, false},
		{"app POST from another site", req("POST", "http://evil.example", ""), true, true},
		{"app POST without Origin", req("POST", "", ""), true, true},
	} {
		why := s.CookieRefused(c.r, token, c.app)
		if (why != "") != c.refused {
			t.Errorf("%s: refused=%q, want refused=%v", c.name, why, c.refused)
		}
	}
}

func TestStripCookie(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: "_xsrf", Value: "x1"})
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "secret-token"})
	r.AddCookie(&http.Cookie{Name: "other", Value: "o"})
	StripCookie(r)
	if _, err := r.Cookie(CookieName); err == nil {
		t.Fatalf("session cookie still sent: %q", r.Header.Get("Cookie"))
	}
	for _, n := range []string{"_xsrf", "other"} {
		if _, err := r.Cookie(n); err != nil {
			t.Errorf("cookie %s dropped: %q", n, r.Header.Get("Cookie"))
		}
	}
}
