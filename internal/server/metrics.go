package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// collector reads tide's long-lived numbers from the store at scrape time,
// so every replica reports the same figures.
type collector struct {
	st       store.Store
	nodes    *prometheus.Desc
	target   *prometheus.Desc
	jobs     *prometheus.Desc
	maxNodes *prometheus.Desc
	minNodes *prometheus.Desc
}

func newCollector(st store.Store) *collector {
	return &collector{
		st:       st,
		nodes:    prometheus.NewDesc("tide_compute_nodes", "Nodes of a compute by state.", []string{"workspace", "compute", "state"}, nil),
		target:   prometheus.NewDesc("tide_compute_target_nodes", "A compute's target node count.", []string{"workspace", "compute"}, nil),
		minNodes: prometheus.NewDesc("tide_compute_min_instances", "A compute's min_instances.", []string{"workspace", "compute"}, nil),
		maxNodes: prometheus.NewDesc("tide_compute_max_instances", "A compute's max_instances.", []string{"workspace", "compute"}, nil),
		jobs:     prometheus.NewDesc("tide_jobs", "Unfinished jobs by status.", []string{"workspace", "compute", "status"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodes
	ch <- c.target
	ch <- c.jobs
	ch <- c.minNodes
	ch <- c.maxNodes
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var computes []api.Compute
	var counts map[[3]string]int
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if computes, err = tx.ListComputes(ctx, ""); err != nil {
			return err
		}
		// Counted by the database: a scrape decoded every unfinished
		// job before (100,000 in the scale benchmark).
		counts, err = tx.CountJobs(ctx, []string{api.JobQueued, api.JobPreparing, api.JobRunning, api.JobFinalizing, api.JobCancelRequested})
		return err
	})
	if err != nil {
		return
	}
	for _, cp := range computes {
		n := cp.NodeStateCounts
		for state, v := range map[string]int{api.NodeIdle: n.Idle, api.NodeRunning: n.Running, api.NodePreparing: n.Preparing,
			api.NodeUnusable: n.Unusable, api.NodeLeaving: n.Leaving, api.NodePreempted: n.Preempted} {
			ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(v), cp.Workspace, cp.Name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(cp.TargetNodeCount), cp.Workspace, cp.Name)
		ch <- prometheus.MustNewConstMetric(c.minNodes, prometheus.GaugeValue, float64(cp.MinInstances), cp.Workspace, cp.Name)
		ch <- prometheus.MustNewConstMetric(c.maxNodes, prometheus.GaugeValue, float64(cp.MaxInstances), cp.Workspace, cp.Name)
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(v), k[0], k[1], k[2])
	}
}

// metricsAuth is how /metrics is guarded: like the API, unless the
// operator opened it (metrics_open) for a scraper that sends no token.
func (s *Server) metricsAuth() auth {
	if s.cfg.MetricsOpen {
		return authPublic
	}
	return authSignedIn
}

// measure times a route's requests for tide_http_request_duration_seconds,
// labelled with the route's pattern (not the path, which would make a
// series per job).
func (s *Server) measure(rt route, h http.HandlerFunc) http.HandlerFunc {
	if s.stats == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		s.stats.Request(rt.pattern, rt.method, sw.code(), time.Since(start))
	}
}

// statusWriter records the status code a handler wrote. It passes on
// Flush (server-sent events) and Hijack (upgraded connections).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		if w.status == 0 {
			w.status = http.StatusSwitchingProtocols
		}
		return h.Hijack()
	}
	return nil, nil, errors.New("the connection cannot be taken over")
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
