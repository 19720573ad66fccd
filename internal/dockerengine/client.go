// Package dockerengine is a small client of the Docker Engine HTTP API over
// its unix socket, with the few calls tide needs: images (inspect, build),
// containers (create, start, wait, inspect, logs, events, stop, remove,
// list) and networks (inspect).
//
// It speaks the HTTP API directly rather than running the `docker` CLI or
// importing the Docker SDK: the API gives typed answers (a container's
// OOMKilled flag, exit code and labels) and the engine's own error messages
// without parsing CLI output, does not depend on which CLI version is
// installed (this machine has a newer CLI than its engine), and the SDK would
// pull dozens of modules into tide for a dozen calls. Requests use
// unversioned paths, which the engine serves at its own API version; the
// fields used here are stable since API 1.41 (Docker 20.10).
package dockerengine

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultSocket is the engine's usual socket.
const DefaultSocket = "/var/run/docker.sock"

// Client talks to one Docker engine. The zero value is not usable; use New.
type Client struct {
	socket string
	hc     *http.Client
}

// New returns a client of the engine listening on socket; an empty socket
// means $DOCKER_HOST when it is a unix:// address, else DefaultSocket.
func New(socket string) *Client {
	if socket == "" {
		socket = DefaultSocket
		if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok && h != "" {
			socket = h
		}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns: 4,
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr}}
}

// Socket is the engine's socket path.
func (c *Client) Socket() string { return c.socket }

// Error is an error answer of the engine; Message is the engine's own text.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("docker engine: %s (HTTP %d)", e.Message, e.Status)
}

// IsNotFound reports whether err is the engine's "no such ..." answer.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// do sends a request and returns the response when its status is 2xx (or
// 304); otherwise it returns an *Error with the engine's message.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u := "http://docker" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker engine at %s: %w", c.socket, err)
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &m) != nil || m.Message == "" {
		m.Message = strings.TrimSpace(string(b))
	}
	return nil, &Error{Status: resp.StatusCode, Message: m.Message}
}

// call sends in as JSON (when not nil) and decodes the answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, query, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the engine's answer to %s %s: %w", method, path, err)
	}
	return nil
}

// Ping checks that the engine answers, within 3 seconds.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return c.call(ctx, http.MethodGet, "/_ping", nil, nil, nil)
}

// ImageExists reports whether the image ref is present locally.
func (c *Client) ImageExists(ctx context.Context, ref string) (bool, error) {
	err := c.call(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// PullImage pulls ref from its registry and returns the engine's error
// message when the pull fails.
func (c *Client) PullImage(ctx context.Context, ref string) error {
	resp, err := c.do(ctx, http.MethodPost, "/images/create", url.Values{"fromImage": {ref}}, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return streamError(resp.Body, nil)
}

// BuildImage builds the Docker build context in the folder dir and tags
// the image tag. Progress lines go to progress (may be nil).
func (c *Client) BuildImage(ctx context.Context, dir, tag string, progress func(string)) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(TarDir(dir, pw)) }()
	defer pr.Close()
	q := url.Values{"t": {tag}, "rm": {"1"}, "forcerm": {"1"}}
	resp, err := c.do(ctx, http.MethodPost, "/build", q, pr, "application/x-tar")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return streamError(resp.Body, progress)
}

// streamError reads a JSON message stream (build, pull) and returns its
// first error message.
func streamError(r io.Reader, progress func(string)) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Stream string `json:"stream"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading the engine's progress: %w", err)
		}
		if m.Error != "" {
			return &Error{Status: http.StatusOK, Message: strings.TrimSpace(m.Error)}
		}
		if progress == nil {
			continue
		}
		for _, l := range strings.Split(strings.TrimRight(m.Stream+m.Status, "\n"), "\n") {
			if l != "" {
				progress(l)
			}
		}
	}
}

// TarDir writes the regular files, folders and symlinks under dir to w as
// a tar stream with paths relative to dir, in a stable order with zeroed
// times, so the same content gives the same bytes.
func TarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := tarWalk(root, ".", tw); err != nil {
		return err
	}
	return tw.Close()
}

func tarWalk(root *os.Root, rel string, tw *tar.Writer) error {
	f, err := root.Open(rel)
	if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	// ReadDir sorts by name.
	for _, e := range entries {
		p := e.Name()
		if rel != "." {
			p = rel + "/" + e.Name()
		}
		info, err := root.Lstat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: p, Mode: int64(info.Mode().Perm()), Format: tar.FormatPAX}
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
		case info.Mode()&os.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		default:
			continue // sockets, devices: not part of a build context
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := root.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, info.Size())
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		if info.IsDir() {
			if err := tarWalk(root, p, tw); err != nil {
				return err
			}
		}
	}
	return nil
}

// ContainerConfig is the body of a container creation (the fields tide uses).
type ContainerConfig struct {
	Image      string            `json:"Image"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	User       string            `json:"User,omitempty"`
	Hostname   string            `json:"Hostname,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
	StopSignal string            `json:"StopSignal,omitempty"`
	HostConfig HostConfig        `json:"HostConfig"`
}

// HostConfig is the part of a container's configuration that concerns the host.
type HostConfig struct {
	Binds       []string `json:"Binds,omitempty"`
	NetworkMode string   `json:"NetworkMode,omitempty"`
	// Memory is the memory limit in bytes; MemorySwap equal to it forbids swap.
	Memory     int64 `json:"Memory,omitempty"`
	MemorySwap int64 `json:"MemorySwap,omitempty"`
	// NanoCPUs is the CPU limit in units of 1e-9 CPUs.
	NanoCPUs       int64           `json:"NanoCpus,omitempty"`
	ShmSize        int64           `json:"ShmSize,omitempty"`
	DeviceRequests []DeviceRequest `json:"DeviceRequests,omitempty"`
	Init           bool            `json:"Init,omitempty"`
	ReadonlyRootfs bool            `json:"ReadonlyRootfs,omitempty"`
}

// DeviceRequest asks for devices such as GPUs (driver "nvidia", Count -1 for all).
type DeviceRequest struct {
	Driver string `json:"Driver,omitempty"`
	// Count asks for that many devices; DeviceIDs for these ones (then
	// Count is 0).
	Count        int        `json:"Count,omitempty"`
	DeviceIDs    []string   `json:"DeviceIDs,omitempty"`
	Capabilities [][]string `json:"Capabilities"`
}

// CreateContainer creates a container named name and returns its id.
func (c *Client) CreateContainer(ctx context.Context, name string, cfg ContainerConfig) (string, error) {
	var out struct {
		ID string `json:"Id"`
	}
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	if err := c.call(ctx, http.MethodPost, "/containers/create", q, cfg, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/start", nil, nil, nil)
}

// StopContainer sends the stop signal and kills the container after grace.
func (c *Client) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	q := url.Values{"t": {fmt.Sprint(int(grace.Seconds()))}}
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/stop", q, nil, nil)
}

// KillContainer sends signal (e.g. "SIGTERM") to the container's main process.
func (c *Client) KillContainer(ctx context.Context, id, signal string) error {
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/kill", url.Values{"signal": {signal}}, nil, nil)
}

// RemoveContainer removes a container, killing it first when it runs.
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/containers/"+id, url.Values{"force": {"1"}, "v": {"1"}}, nil, nil)
}

// WaitContainer blocks until the container stopped and returns its exit code.
func (c *Client) WaitContainer(ctx context.Context, id string) (int, error) {
	var out struct {
		StatusCode int `json:"StatusCode"`
		Error      *struct {
			Message string `json:"Message"`
		} `json:"Error"`
	}
	if err := c.call(ctx, http.MethodPost, "/containers/"+id+"/wait", nil, nil, &out); err != nil {
		return -1, err
	}
	if out.Error != nil && out.Error.Message != "" {
		return out.StatusCode, &Error{Status: http.StatusOK, Message: out.Error.Message}
	}
	return out.StatusCode, nil
}

// Container is what an inspection tells about a container.
type Container struct {
	ID      string `json:"Id"`
	Name    string `json:"Name"`
	Created string `json:"Created"`
	State   struct {
		Status    string `json:"Status"`
		Running   bool   `json:"Running"`
		OOMKilled bool   `json:"OOMKilled"`
		Pid       int    `json:"Pid"`
		ExitCode  int    `json:"ExitCode"`
		Error     string `json:"Error"`
	} `json:"State"`
	Config struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	HostConfig HostConfig `json:"HostConfig"`
}

// InspectContainer returns the container's state.
func (c *Client) InspectContainer(ctx context.Context, id string) (*Container, error) {
	var out Container
	if err := c.call(ctx, http.MethodGet, "/containers/"+id+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListedContainer is one entry of ListContainers.
type ListedContainer struct {
	ID      string            `json:"Id"`
	Names   []string          `json:"Names"`
	State   string            `json:"State"`
	Status  string            `json:"Status"`
	Labels  map[string]string `json:"Labels"`
	Created int64             `json:"Created"`
}

// ListContainers lists the containers, running or not, that carry every
// given label (key=value; an empty value matches any value).
func (c *Client) ListContainers(ctx context.Context, labels map[string]string) ([]ListedContainer, error) {
	var f []string
	for k, v := range labels {
		if v == "" {
			f = append(f, k)
		} else {
			f = append(f, k+"="+v)
		}
	}
	filters, _ := json.Marshal(map[string][]string{"label": f})
	var out []ListedContainer
	err := c.call(ctx, http.MethodGet, "/containers/json", url.Values{"all": {"1"}, "filters": {string(filters)}}, nil, &out)
	return out, err
}

// NetworkExists reports whether the network name (or id) exists.
func (c *Client) NetworkExists(ctx context.Context, name string) (bool, error) {
	err := c.call(ctx, http.MethodGet, "/networks/"+url.PathEscape(name), nil, nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// CreateNetwork creates a bridge network (for tests and setup scripts).
func (c *Client) CreateNetwork(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodPost, "/networks/create", nil, map[string]any{"Name": name, "CheckDuplicate": true}, nil)
}

// RemoveNetwork removes a network.
func (c *Client) RemoveNetwork(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/networks/"+url.PathEscape(name), nil, nil, nil)
}

// Logs follows the container's output from its start, demultiplexing the
// engine's stream into stdout and stderr, until the container stopped and
// its output was read, or ctx ends. The container must not use a TTY.
func (c *Client) Logs(ctx context.Context, id string, stdout, stderr io.Writer) error {
	q := url.Values{"follow": {"1"}, "stdout": {"1"}, "stderr": {"1"}}
	resp, err := c.do(ctx, http.MethodGet, "/containers/"+id+"/logs", q, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return demux(bufio.NewReader(resp.Body), stdout, stderr)
}

// WatchContainer subscribes to the engine's events of one container with
// the given actions (such as "oom") and calls fn with each action until ctx
// ends. It returns once the engine accepted the subscription, so no later
// event is missed; fn runs on the watching goroutine. The engine's event
// history is a small ring that a flood of events overwrites, so only a live
// subscription sees every event.
func (c *Client) WatchContainer(ctx context.Context, id string, actions []string, fn func(action string)) error {
	f, err := json.Marshal(map[string][]string{"type": {"container"}, "container": {id}, "event": actions})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodGet, "/events", url.Values{"filters": {string(f)}}, nil, "")
	if err != nil {
		return err
	}
	go func() {
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var e struct {
				Action string `json:"Action"`
			}
			if dec.Decode(&e) != nil {
				return
			}
			fn(e.Action)
		}
	}()
	return nil
}

// demux splits the engine's multiplexed stream: frames of an 8-byte header
// (stream type, 3 zero bytes, big-endian length) and a payload.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		w := stdout
		if hdr[0] == 2 {
			w = stderr
		}
		if _, err := io.CopyN(w, r, n); err != nil {
			return err
		}
	}
}

// ImportImage creates the image ref (repo:tag) from a root filesystem as a
// tar stream, like `docker import`.
func (c *Client) ImportImage(ctx context.Context, ref string, rootfs io.Reader) error {
	repo, tag := ref, "latest"
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		repo, tag = ref[:i], ref[i+1:]
	}
	q := url.Values{"fromSrc": {"-"}, "repo": {repo}, "tag": {tag}}
	resp, err := c.do(ctx, http.MethodPost, "/images/create", q, rootfs, "application/x-tar")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return streamError(resp.Body, nil)
}

// RemoveImage removes an image.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	return c.call(ctx, http.MethodDelete, "/images/"+ref, url.Values{"force": {"1"}}, nil, nil)
}

// NetworkGateway returns the gateway address of a bridge network: the
// host's own address on it.
func (c *Client) NetworkGateway(ctx context.Context, name string) (string, error) {
	var out struct {
		IPAM struct {
			Config []struct {
				Gateway string `json:"Gateway"`
			} `json:"Config"`
		} `json:"IPAM"`
	}
	if err := c.call(ctx, http.MethodGet, "/networks/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return "", err
	}
	for _, cfg := range out.IPAM.Config {
		if cfg.Gateway != "" {
			return cfg.Gateway, nil
		}
	}
	return "", fmt.Errorf("network %s: no gateway address", name)
}

// LastLogLine returns the last line the container wrote (stdout or
// stderr), or "" when it wrote none.
func (c *Client) LastLogLine(ctx context.Context, id string) (string, error) {
	q := url.Values{"stdout": {"1"}, "stderr": {"1"}, "tail": {"1"}}
	resp, err := c.do(ctx, http.MethodGet, "/containers/"+id+"/logs", q, nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if err := demux(bufio.NewReader(io.LimitReader(resp.Body, 64<<10)), &b, &b); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}
