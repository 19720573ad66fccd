package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/controller"
	"github.com/tideml/tide/internal/service"
)

// sshDialBack bounds the wait for a node's agent to dial back after it was
// asked to serve SSH.
const sshDialBack = 30 * time.Second

// sshRelay pairs a client's upgraded connection with the one the node's
// agent opens back to the server when asked: SSH reaches nodes behind NAT,
// in containers and in pods through the connection the agent already
// keeps, with no port opened on the node. The bytes relayed are SSH's own
// (encrypted end to end between the client and the agent).
type sshRelay struct {
	mu      sync.Mutex
	waiting map[string]sshWait
	// asks are the requests for agents whose stream was not connected
	// here when they came (a node is idle once its agent registered, a
	// moment before its stream connects; an agent reconnecting), by
	// connection ID: they are delivered when the stream connects, until
	// the client stops waiting.
	asks map[string]sshPending
}

type sshWait struct {
	node string
	conn chan net.Conn
}

// sshPending is an SSH request for node's agent, kept until its stream
// connects here or until, when the client stops waiting.
type sshPending struct {
	node    string
	until   time.Time
	deliver func() // asks the agent, connected now
}

// keepAsk keeps an SSH request for node's agent until its stream connects
// here (deliverAsks), or until the client stops waiting.
func (s *Server) keepAsk(id, node string, deliver func()) {
	now := time.Now()
	s.ssh.mu.Lock()
	defer s.ssh.mu.Unlock()
	if s.ssh.asks == nil {
		s.ssh.asks = map[string]sshPending{}
	}
	for k, p := range s.ssh.asks {
		if now.After(p.until) {
			delete(s.ssh.asks, k)
		}
	}
	if _, ok := s.ssh.asks[id]; !ok {
		s.ssh.asks[id] = sshPending{node: node, until: now.Add(sshDialBack), deliver: deliver}
	}
}

// dropAsk forgets SSH request id, and reports whether it was still kept
// (no stream of its node connected here since).
func (s *Server) dropAsk(id string) bool {
	s.ssh.mu.Lock()
	defer s.ssh.mu.Unlock()
	_, ok := s.ssh.asks[id]
	delete(s.ssh.asks, id)
	return ok
}

// deliverAsks asks node's agent, whose stream just connected here, for
// the SSH connections kept for it.
func (s *Server) deliverAsks(node string) {
	now := time.Now()
	var due []func()
	s.ssh.mu.Lock()
	for id, p := range s.ssh.asks {
		if p.node == node {
			delete(s.ssh.asks, id)
			if now.Before(p.until) {
				due = append(due, p.deliver)
			}
		}
	}
	s.ssh.mu.Unlock()
	for _, d := range due {
		d()
	}
}

func (s *Server) sshRoutes(ws string) []route {
	return []route{
		{method: "GET", pattern: ws + "/computes/{name}/ssh", auth: can(service.PermComputesOperate),
			summary: "Open an SSH connection to a node of a compute (HTTP upgrade to tide-ssh; query node=ID): what tide compute ssh-proxy uses", status: 101, handler: s.sshConnect},
		{method: "GET", pattern: "/v1/agent/ssh/{id}", auth: authNode, summary: "Agent: the connection an ssh event asked for (HTTP upgrade to tide-ssh)", status: 101, handler: s.agentSSH},
	}
}

// sshConnect authorizes a client, asks the node's agent to dial back, and
// then relays bytes between the two until either side closes.
func (s *Server) sshConnect(w http.ResponseWriter, r *http.Request) {
	if !upgradeTo(r, api.SSHUpgrade) {
		writeProblem(w, &api.Problem{Status: 400, Code: api.CodeBadRequest, Detail: "this endpoint carries SSH: send 'Connection: Upgrade' and 'Upgrade: " + api.SSHUpgrade + "' (tide compute ssh-proxy does)"})
		return
	}
	if err := s.mayUseInstance(r); err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.svc.SSH(r.Context(), r.PathValue("workspace"), r.PathValue("name"), r.URL.Query().Get("node"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id := randomID()
	t.Open.ID = id
	ch := make(chan net.Conn, 1)
	s.ssh.mu.Lock()
	if s.ssh.waiting == nil {
		s.ssh.waiting = map[string]sshWait{}
	}
	s.ssh.waiting[id] = sshWait{node: t.Node, conn: ch}
	s.ssh.mu.Unlock()
	defer func() {
		s.ssh.mu.Lock()
		delete(s.ssh.waiting, id)
		s.ssh.mu.Unlock()
	}()
	// The request is kept before it is delivered: a stream that connects
	// in between delivers it (the agent ignores a second ask for one
	// connection: its dial-back finds no client waiting).
	ask := controller.Message{Kind: "ssh", Data: t.Open}
	s.keepAsk(id, t.Node, func() { s.hub.Deliver(t.Node, ask) })
	defer s.dropAsk(id)
	if s.hub.Deliver(t.Node, ask) {
		s.dropAsk(id)
	} else if s.repl != nil {
		// Another replica may hold the agent's stream: it asks the agent
		// to dial this one back.
		ask := sshAsk{Workspace: r.PathValue("workspace"), Compute: r.PathValue("name"), Node: t.Node, ID: id, Replica: s.cfg.AdvertiseURL}
		_ = s.repl.askSSH(r.Context(), ask) // failing, it is this replica's, kept
	}
	var agent net.Conn
	timer := time.NewTimer(sshDialBack)
	defer timer.Stop()
	select {
	case agent = <-ch:
	case <-timer.C:
		if s.dropAsk(id) && s.repl == nil {
			writeProblem(w, &api.Problem{Status: 503, Code: "Unavailable", Detail: fmt.Sprintf("the agent of node %s did not connect to this server within %s (it may be starting, reconnecting or stopped); retry in a few seconds", t.Node, sshDialBack)})
			return
		}
		writeProblem(w, &api.Problem{Status: 504, Code: "GatewayTimeout", Detail: fmt.Sprintf("the agent of node %s did not answer the SSH request within %s; see the node's agent log", t.Node, sshDialBack)})
		return
	case <-r.Context().Done():
		return
	case <-s.stopping:
		return
	}
	client, err := hijack(w)
	if err != nil {
		agent.Close()
		s.log.WarnContext(r.Context(), "ssh: taking over the client's connection", "error", err)
		return
	}
	s.log.InfoContext(r.Context(), "ssh session relayed", "node", t.Node, "compute", r.PathValue("name"))
	splice(client, agent, s.stopping)
}

// askAgentSSH asks a node's agent, connected here, to dial back the
// replica where a client waits (a.Replica) for SSH connection a.ID. An
// agent not connected here is asked should its stream connect here
// before the client stops waiting.
func (s *Server) askAgentSSH(a sshAsk) {
	if !s.hub.Connected(a.Node) {
		s.keepAsk(a.ID, a.Node, func() { go s.askAgentSSH(a) })
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sshDialBack)
	defer cancel()
	t, err := s.svc.SSH(ctx, a.Workspace, a.Compute, a.Node)
	if err != nil {
		s.log.Warn("ssh: a client at another replica", "node", a.Node, "replica", a.Replica, "error", err)
		return
	}
	t.Open.ID, t.Open.Replica = a.ID, a.Replica
	s.hub.Deliver(t.Node, controller.Message{Kind: "ssh", Data: t.Open})
}

// agentSSH takes the connection an agent opened back for an SSH request
// and hands it to the client waiting for it.
func (s *Server) agentSSH(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.ssh.mu.Lock()
	wt, ok := s.ssh.waiting[id]
	if ok && wt.node == principalOf(r).node {
		delete(s.ssh.waiting, id)
	}
	s.ssh.mu.Unlock()
	if !ok || wt.node != principalOf(r).node {
		writeProblem(w, &api.Problem{Status: 404, Code: api.CodeNotFound, Detail: "no client waits for SSH connection " + id + " (it gave up, or it was for another node)"})
		return
	}
	c, err := hijack(w)
	if err != nil {
		s.log.WarnContext(r.Context(), "ssh: taking over the agent's connection", "error", err)
		return
	}
	wt.conn <- c
}

// upgradeTo reports whether r asks to switch to protocol.
func upgradeTo(r *http.Request, protocol string) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), protocol) &&
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// hijack answers 101 Switching Protocols and takes over the connection,
// with no deadline (an SSH session lasts as long as its user wants).
func hijack(w http.ResponseWriter) (net.Conn, error) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+api.SSHUpgrade+"\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	if brw.Reader.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: brw.Reader}, nil
	}
	return c, nil
}

// bufferedConn reads what the HTTP server had already buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// splice copies both ways until one side ends, then closes both; a
// stopping server closes them too.
func splice(a, b net.Conn, stopping <-chan struct{}) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	select {
	case <-done:
	case <-stopping:
	}
	a.Close()
	b.Close()
	<-done
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
