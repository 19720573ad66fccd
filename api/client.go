package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to a tide server over its /v1 REST API. It is safe for
// concurrent use. Every method that does I/O takes a context; callers bound
// plain requests with a deadline and leave streams open as long as they want.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	// OnThrottle, when set, hears of every submission the server refused
	// with 429 Too Many Requests that CreateJob is about to send again
	// after wait (attempt of SubmitAttempts), so a program can tell its
	// user why it waits.
	OnThrottle func(err *Error, wait time.Duration, attempt int)
}

// SubmitAttempts is how many times CreateJob sends a submission that the
// server refuses with 429 (nothing is stored then, so a resend is safe),
// waiting each time as the server's Retry-After says.
const SubmitAttempts = 5

// MaxThrottleWait is the longest Retry-After CreateJob waits for; a
// refusal that asks for more is returned at once.
const MaxThrottleWait = time.Minute

// NewClient returns a client for the server at server (for example
// http://127.0.0.1:7430) that sends token as its bearer token. A nil hc
// means http.DefaultClient; it should have no overall Timeout, since log
// streams stay open for as long as a job runs.
func NewClient(server, token string, hc *http.Client) (*Client, error) {
	if server == "" {
		return nil, errors.New("server: no server URL; pass --server or set TIDE_SERVER")
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("server %q: want a URL such as http://127.0.0.1:7430", server)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, token: token, hc: hc}, nil
}

// Server is the base URL the client talks to.
func (c *Client) Server() string { return c.base.String() }

// Error is an error response from the server: its HTTP status and the
// problem+json body (or a problem made up from the status when the body was
// not one).
type Error struct {
	StatusCode int
	Problem    Problem
	// RetryAfter is the wait the Retry-After header asked for (0: none).
	RetryAfter time.Duration
}

// Error returns the problem's detail, which the server writes for people.
func (e *Error) Error() string {
	switch {
	case e.Problem.Detail != "":
		return e.Problem.Detail
	case e.Problem.Title != "":
		return e.Problem.Title
	default:
		return fmt.Sprintf("HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
}

// IsNotFound reports whether err is a server answer that the resource does
// not exist.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.StatusCode == http.StatusNotFound || e.Problem.Code == CodeNotFound)
}

// ProblemCode returns the stable problem code of a server error, or "" when
// err is not one.
func ProblemCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Problem.Code
	}
	return ""
}

// JobFilter narrows a job list; empty fields match everything.
type JobFilter struct {
	Compute string
	Status  string
	// Limit keeps at most this many (0: all); Oldest lists oldest first
	// (the default is newest first).
	Limit  int
	Oldest bool
	// Parent lists the step jobs of this pipeline job instead, in step
	// order (the other fields do not apply).
	Parent string
}

// path joins escaped segments under /v1.
func v1(segments ...string) string {
	var b strings.Builder
	b.WriteString("/v1")
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// url joins the base URL and an already escaped path.
func (c *Client) url(path string, q url.Values) string {
	u := c.base.String() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends a request and decodes a JSON answer into out (when not nil). It
// returns the status code so callers can tell created from updated.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) (int, error) {
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp.StatusCode, responseError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: decoding response: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// responseError reads an error response into an *Error.
func responseError(resp *http.Response) error {
	e := &Error{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(b, &e.Problem) == nil && (e.Problem.Title != "" || e.Problem.Detail != "" || e.Problem.Code != "") {
		if e.Problem.Status == 0 {
			e.Problem.Status = resp.StatusCode
		}
		return e
	}
	e.Problem = Problem{
		Title:  http.StatusText(resp.StatusCode),
		Status: resp.StatusCode,
		Detail: strings.TrimSpace(string(b)),
	}
	if e.Problem.Detail == "" {
		e.Problem.Detail = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.StatusCode == http.StatusNotFound {
		e.Problem.Code = CodeNotFound
	}
	return e
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func list[T any](ctx context.Context, c *Client, path string, q url.Values) ([]T, error) {
	var l List[T]
	if _, err := c.do(ctx, http.MethodGet, path, q, nil, &l); err != nil {
		return nil, err
	}
	return l.Value, nil
}

// Ready reports whether the server answers /readyz.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
	return err
}

// Sizes lists the VM sizes the server offers.
func (c *Client) Sizes(ctx context.Context) ([]Size, error) {
	return list[Size](ctx, c, v1("sizes"), nil)
}

// Locations lists the places nodes come from.
func (c *Client) Locations(ctx context.Context) ([]Location, error) {
	return list[Location](ctx, c, v1("locations"), nil)
}

// Usages lists quota use per location, VM family and tier; an empty location
// means every location.
func (c *Client) Usages(ctx context.Context, location string) ([]Usage, error) {
	var q url.Values
	if location != "" {
		q = url.Values{"location": {location}}
	}
	return list[Usage](ctx, c, v1("usages"), q)
}

// Workspaces lists the workspaces.
func (c *Client) Workspaces(ctx context.Context) ([]Workspace, error) {
	return list[Workspace](ctx, c, v1("workspaces"), nil)
}

// Workspace returns one workspace.
func (c *Client) Workspace(ctx context.Context, name string) (*Workspace, error) {
	var w Workspace
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", name), nil, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// PutWorkspace creates or updates a workspace.
func (c *Client) PutWorkspace(ctx context.Context, w Workspace) (*Workspace, error) {
	var out Workspace
	if _, err := c.do(ctx, http.MethodPut, v1("workspaces", w.Name), nil, w, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Computes lists the computes of workspace ws.
func (c *Client) Computes(ctx context.Context, ws string) ([]Compute, error) {
	return list[Compute](ctx, c, v1("workspaces", ws, "computes"), nil)
}

// Compute returns one compute.
func (c *Client) Compute(ctx context.Context, ws, name string) (*Compute, error) {
	var out Compute
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "computes", name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutCompute creates or updates compute cp (by its name) and reports whether
// it was created. Provisioning continues on the server; the returned
// compute's provisioning_state tells how far it got.
func (c *Client) PutCompute(ctx context.Context, ws string, cp *Compute) (out *Compute, created bool, err error) {
	if cp.Name == "" {
		return nil, false, errors.New("name: required")
	}
	out = new(Compute)
	code, err := c.do(ctx, http.MethodPut, v1("workspaces", ws, "computes", cp.Name), nil, cp, out)
	if err != nil {
		return nil, false, err
	}
	return out, code == http.StatusCreated, nil
}

// PatchCompute changes the fields of a compute that may change while it runs.
func (c *Client) PatchCompute(ctx context.Context, ws, name string, p ComputePatch) (*Compute, error) {
	var out Compute
	if _, err := c.do(ctx, http.MethodPatch, v1("workspaces", ws, "computes", name), nil, p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteCompute deletes a compute. The server may answer before its nodes
// are gone (202 Accepted); the compute then shows provisioning_state
// Deleting until they are.
func (c *Client) DeleteCompute(ctx context.Context, ws, name string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "computes", name), nil, nil, nil)
	return err
}

// DetachCompute detaches an attached machine (type virtualmachine): its
// node stops and the machine is left as it was. The server refuses (409)
// while the compute has unfinished jobs, unless force, which cancels them.
func (c *Client) DetachCompute(ctx context.Context, ws, name string, force bool) error {
	q := url.Values{"underlyingResourceAction": {"Detach"}}
	if force {
		q.Set("force", "true")
	}
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "computes", name), q, nil, nil)
	return err
}

// Nodes lists the nodes of a compute.
func (c *Client) Nodes(ctx context.Context, ws, compute string) ([]Node, error) {
	return list[Node](ctx, c, v1("workspaces", ws, "computes", compute, "nodes"), nil)
}

// PreemptNode preempts a node of a low-priority compute, as an eviction would.
func (c *Client) PreemptNode(ctx context.Context, ws, compute, node string) (*Node, error) {
	var out Node
	if _, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "computes", compute, "nodes", node, "preempt"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ComputeEvents lists what happened to a compute, oldest first.
func (c *Client) ComputeEvents(ctx context.Context, ws, compute string) ([]Event, error) {
	return list[Event](ctx, c, v1("workspaces", ws, "computes", compute, "events"), nil)
}

// JobEvents lists what happened to a job (queued, placed, requeued, ...), oldest first.
func (c *Client) JobEvents(ctx context.Context, ws, job string) ([]Event, error) {
	return list[Event](ctx, c, v1("workspaces", ws, "jobs", job, "events"), nil)
}

// CreateJob submits a job. An empty name asks the server to generate one.
//
// A submission the server refuses with 429 (its workspace submits too
// fast or has too many jobs queued) is sent again after the Retry-After
// wait, SubmitAttempts times in all, telling OnThrottle each time; the
// last refusal is returned, as is one whose wait would outlast ctx or
// MaxThrottleWait.
func (c *Client) CreateJob(ctx context.Context, ws string, j *Job) (*Job, error) {
	for attempt := 1; ; attempt++ {
		var out Job
		_, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "jobs"), nil, j, &out)
		var e *Error
		if err == nil || !errors.As(err, &e) || e.StatusCode != http.StatusTooManyRequests || attempt == SubmitAttempts {
			if err != nil {
				return nil, err
			}
			return &out, nil
		}
		wait := max(e.RetryAfter, 100*time.Millisecond)
		if d, ok := ctx.Deadline(); wait > MaxThrottleWait || ok && time.Until(d) < wait {
			return nil, err
		}
		if c.OnThrottle != nil {
			c.OnThrottle(e, wait, attempt)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// ValidateJob asks the server to check a job before its local code and
// data are uploaded: its fields, compute, environment, datastores and name.
// The error lists every problem at once (Problem.Errors).
func (c *Client) ValidateJob(ctx context.Context, ws string, j *Job) error {
	_, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "jobs", "validate"), nil, j, nil)
	return err
}

// Jobs lists the jobs of workspace ws in creation order.
func (c *Client) Jobs(ctx context.Context, ws string, f JobFilter) ([]Job, error) {
	q := url.Values{}
	if f.Compute != "" {
		q.Set("compute", f.Compute)
	}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Oldest {
		q.Set("order", "oldest")
	}
	if f.Parent != "" {
		q.Set("parent", f.Parent)
	}
	return list[Job](ctx, c, v1("workspaces", ws, "jobs"), q)
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, ws, name string) (*Job, error) {
	var out Job
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "jobs", name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelJob asks the server to cancel a job; the job moves to
// CancelRequested and then Canceled once its processes stopped.
func (c *Client) CancelJob(ctx context.Context, ws, name string) (*Job, error) {
	var out Job
	if _, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "jobs", name, "cancel"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Logs returns the log lines of a job stored so far with Seq > after.
func (c *Client) Logs(ctx context.Context, ws, job string, after int64) ([]LogLine, error) {
	var q url.Values
	if after > 0 {
		q = url.Values{"after": {strconv.FormatInt(after, 10)}}
	}
	return list[LogLine](ctx, c, v1("workspaces", ws, "jobs", job, "logs"), q)
}

// Artifacts lists the files a job kept.
func (c *Client) Artifacts(ctx context.Context, ws, job string) ([]Artifact, error) {
	return list[Artifact](ctx, c, v1("workspaces", ws, "jobs", job, "artifacts"), nil)
}

// OpenArtifact starts downloading one artifact; the caller closes the body.
// size is -1 when the server did not say.
func (c *Client) OpenArtifact(ctx context.Context, ws, job, path string) (body io.ReadCloser, size int64, err error) {
	p := v1("workspaces", ws, "jobs", job, "artifacts")
	for _, seg := range strings.Split(strings.Trim(path, "/"), "/") {
		p += "/" + url.PathEscape(seg)
	}
	req, err := c.newRequest(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, 0, responseError(resp)
	}
	return resp.Body, resp.ContentLength, nil
}

// Cost reports what a workspace cost since a time ("" for all), grouped
// by one of CostGroups.
func (c *Client) Cost(ctx context.Context, ws, by, since string) (*CostReport, error) {
	q := url.Values{}
	if by != "" {
		q.Set("by", by)
	}
	if since != "" {
		q.Set("since", since)
	}
	var out CostReport
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "cost"), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ComputeHistory returns a compute's samples since a time ("" for the
// server's default, a day) in at most points buckets (0: the default).
func (c *Client) ComputeHistory(ctx context.Context, ws, name, since string, points int) ([]ComputeSample, error) {
	q := url.Values{}
	if since != "" {
		q.Set("since", since)
	}
	if points > 0 {
		q.Set("points", strconv.Itoa(points))
	}
	var out []ComputeSample
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "computes", name, "history"), q, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
