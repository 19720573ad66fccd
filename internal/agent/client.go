package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// client talks to one of several server replicas, moving to the next one
// when a request fails for a reason other than the server's answer.
type client struct {
	urls  []string
	token string
	hc    *http.Client
	cur   atomic.Int64
}

// statusError is a non-2xx answer.
type statusError struct {
	Code int
	Body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("server answered %d: %s", e.Code, strings.TrimSpace(e.Body))
}

// permanent reports whether retrying err cannot help: the server understood
// the request and refused it. 5xx (a restarting or overloaded server),
// 408 and 429 are worth retrying.
func permanent(err error) bool {
	var se *statusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code >= 400 && se.Code < 500 && se.Code != http.StatusRequestTimeout && se.Code != http.StatusTooManyRequests
}

func (c *client) base() string {
	return strings.TrimRight(c.urls[int(c.cur.Load())%len(c.urls)], "/")
}

// baseFor returns url when it is one of the server URLs the agent was
// given (so a message cannot send the agent's token elsewhere), else the
// current one.
func (c *client) baseFor(url string) string {
	url = strings.TrimRight(url, "/")
	for _, u := range c.urls {
		if url != "" && strings.TrimRight(u, "/") == url {
			return url
		}
	}
	return c.base()
}

// failover moves to the next server URL.
func (c *client) failover() {
	if len(c.urls) > 1 {
		c.cur.Add(1)
	}
}

func (c *client) newRequest(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Request, error) {
	return c.newRequestAt(ctx, c.base(), method, path, body, contentType)
}

// newRequestAt is newRequest to the server at base.
func (c *client) newRequestAt(ctx context.Context, base, method, path string, body io.Reader, contentType string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, fmt.Errorf("building request %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, nil
}

// send performs one request and checks its status; the answer's body is
// decoded into out when out is not nil.
func (c *client) send(req *http.Request, out any) error {
	resp, err := c.hc.Do(req)
	if err != nil {
		c.failover()
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode >= 500 {
			c.failover()
		}
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, &statusError{Code: resp.StatusCode, Body: string(b)})
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding answer: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// postJSON posts in as JSON and decodes the answer into out (if not nil).
func (c *client) postJSON(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, path, bytes.NewReader(b), "application/json")
	if err != nil {
		return err
	}
	return c.send(req, out)
}
