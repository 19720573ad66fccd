// Package server is tide's control plane process: it opens the store,
// starts the controller, and serves the REST API, the agent protocol,
// health checks and metrics. Handlers translate HTTP into calls on
// internal/service and errors into problem+json responses; they hold no
// business logic.
package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/blob"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/controller"
	"github.com/tideml/tide/internal/dockerengine"
	"github.com/tideml/tide/internal/filestore"
	"github.com/tideml/tide/internal/metrics"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/builtin"
	"github.com/tideml/tide/internal/ratelimit"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/postgres"
	"github.com/tideml/tide/internal/store/sqlite"
	"github.com/tideml/tide/internal/studio"
)

// Server is a running control plane.
type Server struct {
	cfg     config.Server
	log     *slog.Logger
	store   store.Store
	svc     *service.Service
	ctrl    *controller.Controller
	hub     *controller.Hub
	changes *controller.Broadcast
	metrics http.Handler
	stats   *metrics.Metrics
	access  *accessCache
	audit   *auditLog
	nodeKey []byte
	// nodeTokens remembers the token of each node whose agent
	// authenticated (nodeTokenCache).
	nodeTokens nodeTokenCache
	repl       *replication // nil: the store is not shared; this server leads
	blobs      *blob.Store
	files      filestore.Store // artifacts, snapshots, checkpoints (storage:)
	studio     *studio.Studio
	stopping   chan struct{}
	// caFingerprint is the SHA-256 of the CA this server's certificate
	// chains to ("" without TLS); clients and agents pin it.
	caFingerprint string
	tls           *tls.Config // nil: plain HTTP
	// submissions are the workspaces' token buckets (limits.submit_rate).
	submissions ratelimit.Buckets
	// ssh pairs SSH clients with the agents they reach.
	ssh sshRelay
	// AdminToken is set when this start created the admin token.
	AdminToken string
	// Addr is the address the API listens on, once listening.
	Addr string
}

// Run starts a server and blocks until ctx ends, then shuts down
// gracefully: in-flight requests finish, agent streams close (agents keep
// running their jobs and reconnect to the next server).
func Run(ctx context.Context, cfg config.Server, log *slog.Logger) error {
	// Listen first: a server that cannot have its port must change
	// nothing (above all not the CLI's configuration of the server that
	// has it).
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s, err := New(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	return s.Serve(ctx, ln)
}

// New opens the store and builds the server without listening yet.
func New(ctx context.Context, cfg config.Server, log *slog.Logger) (*Server, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// Nobody else lists the data folder (jobs of the process runtime run
	// as another user on a root server); the agents of local nodes under
	// it let their jobs pass through it (o+x) and no more.
	if fi, err := os.Stat(cfg.DataDir); err == nil && fi.Mode().Perm()&0o066 != 0 {
		if err := os.Chmod(cfg.DataDir, fi.Mode().Perm()&^0o066); err != nil {
			return nil, fmt.Errorf("data dir %s: making it private: %w", cfg.DataDir, err)
		}
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	cat, err := catalog.Default().WithOverrides(cfg.Sizes)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("sizes: %w", err)
	}
	if _, ok := cat.Lookup(cfg.Serverless.InstanceType); cfg.Serverless.InstanceType != "" && !ok {
		st.Close()
		return nil, fmt.Errorf("serverless.instance_type: unknown VM size %q; run 'tide compute list-sizes' or add it under sizes:", cfg.Serverless.InstanceType)
	}
	s := &Server{cfg: cfg, log: log.With("replica", cfg.Replica), store: st, hub: controller.NewHub(),
		changes: controller.NewBroadcast(), stopping: make(chan struct{}), access: newAccessCache()}
	log = s.log
	s.audit = newAuditLog(st, log, s.now, s.stopping)
	if s.tls, s.caFingerprint, err = serverTLS(cfg); err != nil {
		st.Close()
		return nil, err
	}
	if err := checkReplicaCA(ctx, st, cfg, s.caFingerprint); err != nil {
		st.Close()
		return nil, err
	}
	cfg.CAFingerprint = s.caFingerprint
	s.cfg = cfg
	if s.files, err = filestore.Open(ctx, cfg.StorageDatastore()); err != nil {
		st.Close()
		return nil, err
	}
	if s.blobs, err = blob.New(s.files, s.scratchDir(), int64(cfg.MaxDataSize)); err != nil {
		st.Close()
		return nil, err
	}
	s.cleanScratch(time.Now()) // file times are the machine's, not cfg.Clock's
	reg := prometheus.NewRegistry()
	s.stats = metrics.New(reg)
	// The service and the controller write through a store that counts
	// what each committed transaction did (internal/metrics).
	counted := metrics.Observe(st, s.stats)
	box, err := service.OpenSecretBox(cfg.SecretKeyPath())
	if err != nil {
		st.Close()
		return nil, err
	}
	s.svc = &service.Service{SecretBox: box, Store: counted, Catalog: cat, Config: cfg, Log: log, Blobs: s.blobs, Outputs: stepOutputs{files: s.files, blobs: s.blobs, scratch: s.scratchDir()}, Artifacts: jobArtifacts{files: s.files}, DockerEngine: dockerengine.New("").Ping, HostGPUs: hostGPUs, Now: cfg.Clock,
		IdentityToken: s.jobIdentityToken}
	if err := s.svc.Bootstrap(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("bootstrapping store: %w", err)
	}
	if err := s.bootstrapSecrets(ctx); err != nil {
		st.Close()
		return nil, err
	}
	if n, err := service.ResealSecrets(ctx, st, box); err != nil {
		st.Close()
		if errors.Is(err, service.ErrKeyMismatch) {
			return nil, err
		}
		return nil, fmt.Errorf("sealing the stored secrets with the key in %s: %w", cfg.SecretKeyPath(), err)
	} else if n.Secrets+n.DatastoreCredentials > 0 {
		log.Info("sealed stored secrets with the secret key (values stored in clear, or a key rotation finished)", "secrets", n.Secrets, "datastore_credentials", n.DatastoreCredentials)
	}
	s.studio = s.newStudio()
	providers := map[string]provider.Provider{}
	registry := cfg.Providers
	if registry == nil {
		registry = builtin.Providers()
	}
	for _, l := range cfg.Locations {
		p, err := registry.New(l.Provider, l.Settings, provider.Deps{Logger: log.With("location", l.Name), DataDir: filepath.Join(cfg.DataDir, "locations", l.Name)})
		if err != nil {
			log.Error("location has no working provider", "location", l.Name, "err", err)
			continue
		}
		providers[l.Name] = p
	}
	s.svc.HostCapacity = func(location string) (api.Size, bool) {
		if h, ok := providers[location].(provider.Hosted); ok {
			return h.HostCapacity(), true
		}
		return api.Size{}, false
	}
	s.svc.ProbeMachine = s.probeMachine
	s.svc.ProbeKubernetes = s.probeKubernetes
	s.ctrl = controller.New(controller.Options{Store: counted, Catalog: cat, Config: cfg, Providers: providers, AttachedProvider: s.attachedProvider,
		Hub: s.hub, Changes: s.changes, Log: log.With("component", "controller"), NodeToken: s.nodeToken, IdentityToken: s.jobIdentityToken, SecretBox: s.svc.SecretBox, Now: cfg.Clock, Metrics: s.stats, Parents: s.svc, Silent: s.svc.Silent})
	s.hub.Sent = s.svc.Recheck
	s.svc.Placer = s.ctrl
	if c, ok := st.(store.Cluster); ok {
		s.repl = newReplication(s, c)
		s.hub.Relay = s.repl.relay
	}
	s.svc.Notify = func() {
		s.ctrl.Notify()
		s.changes.Notify()
		if s.repl != nil {
			s.repl.changedLocally()
		}
	}
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}), newCollector(st),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "tide_leader",
			Help:        "1 when this replica leads (runs the controller), else 0.",
			ConstLabels: prometheus.Labels{"replica": cfg.Replica},
		}, func() float64 {
			if s.Leading() {
				return 1
			}
			return 0
		}))
	if c, ok := st.(interface{ Statements() int64 }); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tide_store_statements_total",
			Help: "SQL statements the store has run, transactions' BEGIN and COMMIT included.",
		}, func() float64 { return float64(c.Statements()) }))
	}
	s.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return s, nil
}

func openStore(ctx context.Context, cfg config.Server, log *slog.Logger) (store.Store, error) {
	switch {
	case cfg.Store == "" || strings.HasPrefix(cfg.Store, "sqlite:"):
		path := strings.TrimPrefix(cfg.Store, "sqlite:")
		if path == "" {
			path = filepath.Join(cfg.DataDir, "tide.db")
		}
		return sqlite.Open(ctx, path, log)
	case strings.HasPrefix(cfg.Store, "postgres://") || strings.HasPrefix(cfg.Store, "postgresql://"):
		return postgres.Open(ctx, cfg.Store, log)
	default:
		return nil, fmt.Errorf("store %q: unsupported; use an empty value (SQLite in the data dir), sqlite:PATH or a postgres:// URL", cfg.Store)
	}
}

// bootstrapSecrets creates, on the first start, the key that signs node
// tokens and the admin API token, and writes the client configuration so
// that `tide` on this machine works with no flags.
func (s *Server) bootstrapSecrets(ctx context.Context) error {
	var token string
	err := s.store.Update(ctx, func(tx store.Tx) error {
		token = ""
		key, err := tx.GetSetting(ctx, "node_token_key")
		if store.IsNotFound(err) {
			key = randomHex(32)
			if err := tx.PutSetting(ctx, "node_token_key", key); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		s.nodeKey, _ = hex.DecodeString(key)
		now := time.Now().UTC()
		if err := service.EnsureBootstrapUser(ctx, tx, now); err != nil {
			return err
		}
		if _, err := tx.GetSetting(ctx, "admin_token_created"); err == nil {
			return nil
		} else if !store.IsNotFound(err) {
			return err
		}
		t, err := service.MintToken(ctx, tx, service.BootstrapUser, "bootstrap", time.Time{}, now)
		if err != nil {
			return err
		}
		token = t.Secret
		return tx.PutSetting(ctx, "admin_token_created", now.Format(time.RFC3339))
	})
	if err != nil {
		return fmt.Errorf("creating secrets: %w", err)
	}
	if token == "" {
		return nil
	}
	s.AdminToken = token
	path := s.cfg.ClientConfig
	if path == "-" {
		return nil
	}
	if path == "" {
		if path, err = api.DefaultConfigPath(); err != nil {
			return err
		}
	}
	name := api.ContextName(s.cfg.AdvertiseURL)
	current, err := api.SaveClientConfig(path, name, api.ClientConfig{Server: s.cfg.AdvertiseURL, Token: token,
		Workspace: api.DefaultWorkspace, CAFingerprint: s.caFingerprint})
	if err != nil {
		return err
	}
	if current {
		s.log.Info("created the admin token and wrote the CLI configuration", "path", path, "context", name)
	} else {
		s.log.Info("created the admin token and added this server to the CLI configuration; select it with 'tide config use-context "+name+"'", "path", path, "context", name)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// nodeToken signs a node id: "node.<id>.<mac>". Nothing is stored, and a
// token stops working when its node is deleted.
// NodeToken is the bearer token node id's agent authenticates with, as
// its provider passes it (for tests that act as a node).
func (s *Server) NodeToken(id string) string { return s.nodeToken(id) }

// AgentConnected reports whether node id's agent holds its assignment
// stream on this server (for tests).
func (s *Server) AgentConnected(id string) bool { return s.hub.Connected(id) }

func (s *Server) nodeToken(id string) string {
	m := hmac.New(sha256.New, s.nodeKey)
	m.Write([]byte(id))
	return "node." + id + "." + hex.EncodeToString(m.Sum(nil))
}

func (s *Server) checkNodeToken(secret string) (string, bool) {
	rest, ok := strings.CutPrefix(secret, "node.")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, ".")
	if i < 0 {
		return "", false
	}
	id := rest[:i]
	want, known := s.nodeTokens.get(id)
	if !known {
		want = s.nodeToken(id)
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(secret)) != 1 {
		return id, false
	}
	if !known {
		s.nodeTokens.put(id, want)
	}
	return id, true
}

// nodeTokenCache holds the tokens of the nodes whose agents authenticated,
// by node: an agent's every request (1,000 heartbeats a second at 10,000
// nodes) is then checked by a lookup and the same constant-time compare,
// not by computing the HMAC again. Only tokens that passed are kept, so
// its size is bounded by the nodes that exist; it starts over past
// maxNodeTokens (nodes come and go).
type nodeTokenCache struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxNodeTokens = 100000

func (c *nodeTokenCache) get(id string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.m[id]
	return t, ok
}

func (c *nodeTokenCache) put(id, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxNodeTokens {
		c.m = map[string]string{}
	}
	c.m[id] = token
}

// Serve listens (on ln, or on the configured address when ln is nil) and
// runs the controller until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.store.Close()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	s.Addr = ln.Addr().String()
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	srv := &http.Server{Handler: logRequests(s.log, s.mux()), ReadHeaderTimeout: 10 * time.Second}
	ctrlCtx, stopCtrl := context.WithCancel(context.WithoutCancel(ctx))
	ctrlDone := make(chan struct{})
	go func() {
		defer close(ctrlDone)
		if s.repl != nil {
			s.repl.run(ctrlCtx)
			return
		}
		_ = s.ctrl.Run(ctrlCtx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("tide server listening", "addr", s.Addr, "data_dir", s.cfg.DataDir)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	close(s.stopping)
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	stopCtrl()
	<-ctrlDone
	s.audit.flush(context.Background())
	s.log.Info("tide server stopped")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Leading reports whether this replica runs the controller: always with
// SQLite, while it holds the leader lock with PostgreSQL.
func (s *Server) Leading() bool { return s.repl == nil || s.repl.leading.Load() }

// Handler returns the HTTP handler, for tests.
func (s *Server) Handler() http.Handler { return s.mux() }

func (s *Server) runtimeOf(ctx context.Context, node string) string {
	var loc string
	_ = s.store.View(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, node)
		if err == nil {
			loc = n.Location
		}
		return err
	})
	return s.ctrl.Runtime(loc)
}

// hostGPUs counts this host's NVIDIA GPUs (/dev/nvidia0, /dev/nvidia1, ...),
// the devices the docker runtime passes to containers.
func hostGPUs() int {
	devs, _ := filepath.Glob("/dev/nvidia[0-9]*")
	return len(devs)
}

// MintOwnerToken opens a server's store directly (an operator who lost
// the bootstrap token, on the server's machine) and makes a new token for
// the bootstrap owner.
func MintOwnerToken(ctx context.Context, cfg config.Server, name string, expires time.Duration) (api.Token, error) {
	st, err := openStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return api.Token{}, err
	}
	defer st.Close()
	now := time.Now().UTC()
	var exp time.Time
	if expires > 0 {
		exp = now.Add(expires)
	}
	var t api.Token
	err = st.Update(ctx, func(tx store.Tx) error {
		if err := service.EnsureBootstrapUser(ctx, tx, now); err != nil {
			return err
		}
		t, err = service.MintToken(ctx, tx, service.BootstrapUser, name, exp, now)
		return err
	})
	return t, err
}

// CAFingerprint is the SHA-256 of the CA the server's TLS certificate
// chains to ("" when it serves plain HTTP or a certificate from tls_cert
// without its CA).
func (s *Server) CAFingerprint() string { return s.caFingerprint }
