// Package studio is tide in the browser: a page at / whose scripts call the
// same /v1 REST API as the CLI. The browser holds the user's API token in
// an HttpOnly, SameSite=Strict cookie; the server authenticates a request
// that has no Authorization header by that cookie and runs the route's own
// authorization rule, so Studio shows and does exactly what the API allows
// the token. A request that changes something and authenticates by the
// cookie must carry the session's CSRF token in a header (X-Tide-CSRF),
// which a page on another site can neither read nor send.
//
// The assets are plain HTML, CSS and JavaScript embedded in the binary, and
// uPlot for charts, vendored unchanged from npm by vendor.sh: nothing is
// built and nothing is fetched at run time.
package studio

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

const (
	// CookieName is the cookie holding the signed-in user's API token.
	CookieName = "tide_session"
	// CSRFHeader carries the session's CSRF token on requests that change
	// something.
	CSRFHeader = "X-Tide-CSRF"
	// sessionAge is how long a browser keeps the token: a token is pasted
	// once, not at every visit.
	sessionAge = 30 * 24 * time.Hour
)

// Authenticator checks a user's API token. Its error is shown on the
// sign-in page, so it says why the token is refused.
type Authenticator func(ctx context.Context, token string) error

// Studio serves the pages and the sign-in endpoints.
type Studio struct {
	key  []byte
	auth Authenticator
}

// New returns a Studio whose CSRF tokens are signed with key (a server
// secret) and whose sign-in checks tokens with auth.
func New(key []byte, auth Authenticator) *Studio {
	return &Studio{key: key, auth: auth}
}

// Register adds Studio's routes to mux: the page at /, its assets under
// /studio/, and the session endpoints.
func (s *Studio) Register(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /studio/", http.StripPrefix("/studio/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("POST /studio/signin", s.signIn)
	mux.HandleFunc("POST /studio/signout", s.signOut)
	mux.HandleFunc("GET /studio/session", s.session)
}

// headers are the browser protections every Studio response carries: only
// this server's scripts and styles run, and no other site may frame it.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// CookieToken returns the API token in r's session cookie.
func CookieToken(r *http.Request) (string, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return "", false
	}
	return c.Value, true
}

// Safe reports whether a method only reads, so it needs no CSRF token.
func Safe(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// CSRFToken is the CSRF token of a session holding token: an HMAC, so the
// server keeps no session state and a token works on every replica.
func (s *Studio) CSRFToken(token string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("studio-csrf\x00" + token))
	return hex.EncodeToString(m.Sum(nil))
}

// ValidCSRF reports whether r carries the CSRF token of the session
// holding token.
func (s *Studio) ValidCSRF(r *http.Request, token string) bool {
	got := r.Header.Get(CSRFHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRFToken(token))) == 1
}

// CookieRefused says why a request signed in by the session cookie that
// holds token is refused, or "" when it may go on. An API call that
// changes something must carry the session's CSRF token. An application
// route (an instance's Jupyter, proxied) cannot: Jupyter's own pages
// send their own headers, not Studio's. There the browser's Origin
// stands in for the token, as on the sign-in form: a request that changes
// something, and any request that names an Origin (a WebSocket handshake
// is a GET with one), must come from this server's own origin.
func (s *Studio) CookieRefused(r *http.Request, token string, app bool) string {
	if app {
		if (!Safe(r.Method) || r.Header.Get("Origin") != "") && !sameOrigin(r) {
			return "a request to an instance's application signed in by Studio's cookie must come from this server's own pages (Origin " + strconv.Quote(r.Header.Get("Origin")) + ")"
		}
		return ""
	}
	if !Safe(r.Method) && !s.ValidCSRF(r, token) {
		return "missing or wrong " + CSRFHeader + " header: a request signed in by Studio's cookie must come from Studio's own pages"
	}
	return ""
}

// StripCookie removes the session cookie from a request about to be
// proxied to a node: the user's API token must not reach a Jupyter server
// (or anything the user's notebook runs). Other cookies (Jupyter's own
// _xsrf) pass.
func StripCookie(r *http.Request) {
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cookies {
		if c.Name != CookieName {
			r.AddCookie(c)
		}
	}
}

// sameOrigin reports whether a request comes from a page of this server:
// the sign-in form has no session yet to take a CSRF token from, so it
// relies on the Origin the browser sets (and Sec-Fetch-Site when a browser
// omits Origin).
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Title: http.StatusText(status), Status: status, Code: code, Detail: detail})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// Session is what the page learns about its session: never the token.
type Session struct {
	CSRF string `json:"csrf"`
}

func (s *Studio) signIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeProblem(w, 403, "Forbidden", "sign-in must come from this server's own sign-in page")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		writeProblem(w, 400, "ValidationError", "token: paste an API token (the CLI's is in ~/.config/tide/config.json, or the TIDE_TOKEN you use)")
		return
	}
	if err := s.auth(r.Context(), token); err != nil {
		writeProblem(w, 401, "Unauthorized", err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: token, Path: "/", MaxAge: int(sessionAge.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	writeJSON(w, Session{CSRF: s.CSRFToken(token)})
}

func (s *Studio) signOut(w http.ResponseWriter, r *http.Request) {
	token, ok := CookieToken(r)
	if ok && !s.ValidCSRF(r, token) {
		writeProblem(w, 403, "Forbidden", "missing or wrong "+CSRFHeader+" header: sign out from Studio's own page")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// errNoSession is the reason shown when the browser holds no token.
var errNoSession = errors.New("not signed in: paste an API token")

func (s *Studio) session(w http.ResponseWriter, r *http.Request) {
	token, ok := CookieToken(r)
	if !ok {
		writeProblem(w, 401, "Unauthorized", errNoSession.Error())
		return
	}
	if err := s.auth(r.Context(), token); err != nil {
		writeProblem(w, 401, "Unauthorized", err.Error())
		return
	}
	writeJSON(w, Session{CSRF: s.CSRFToken(token)})
}
