package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/runmetrics"
)

// mlflowRun serves, on the agent's loopback endpoint for one job attempt
// (mlflowEndpoint), the part of MLflow's
// tracking REST API (/api/2.0/mlflow/...) that mlflow.log_metric(s),
// log_param(s), set_tag(s), start_run/end_run and autolog call, so a script
// written for Azure ML's MLflow works unchanged when the mlflow package is
// installed. The job's run is the attempt itself (MLFLOW_RUN_ID is the job's
// name): what it logs becomes the job's own log lines (##tide metric, param
// and tag), which the server reads as it reads a script's printed ones. No
// credential of the agent is involved: the endpoint takes only the job's
// own random MLFLOW_TRACKING_TOKEN.
type mlflowRun struct {
	j     *job
	runID string
	token string
	start time.Time
	e     *mlflowEndpoint

	mu      sync.Mutex
	status  string
	end     time.Time
	params  map[string]string
	tags    map[string]string
	metrics map[string]mlflowMetric // latest per key
}

type mlflowMetric struct {
	Key       string  `json:"key"`
	Value     float64 `json:"value"`
	Timestamp int64   `json:"timestamp"`
	Step      int64   `json:"step"`
}

type mlflowKV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// mlflowExperimentID is the one experiment a job's endpoint knows: the
// job's own (experiment_name). mlflow.set_experiment(NAME) gets it for any
// name, so a script that sets one still logs to the job's run.
const mlflowExperimentID = "1"

// mlflowEndpoint is the agent's MLflow endpoint: one loopback listener,
// made for the first job, that serves every job's run by its token.
// (A listener and a server per job were 4 % of the agent's CPU on no-op
// jobs.)
type mlflowEndpoint struct {
	once sync.Once
	addr string
	err  error

	mu   sync.Mutex
	runs map[[sha256.Size]byte]*mlflowRun // by the token's hash
}

// listen starts the endpoint, once; it stops when the agent's jobs do.
func (e *mlflowEndpoint) listen(a *agent) error {
	e.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.err = fmt.Errorf("MLflow endpoint: %w", err)
			return
		}
		e.addr, e.runs = ln.Addr().String(), map[[sha256.Size]byte]*mlflowRun{}
		mux := http.NewServeMux()
		mux.HandleFunc("/api/2.0/mlflow/", func(w http.ResponseWriter, r *http.Request) {
			// By the token's hash: the lookup's time says nothing of a
			// token.
			key := sha256.Sum256([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
			e.mu.Lock()
			m := e.runs[key]
			e.mu.Unlock()
			if m == nil {
				mlflowError(w, 401, "UNAUTHENTICATED", "send the job's MLFLOW_TRACKING_TOKEN as a bearer token")
				return
			}
			m.serve(w, r)
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			mlflowError(w, 404, "ENDPOINT_NOT_FOUND", "tide's MLflow endpoint serves /api/2.0/mlflow/ only")
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		if ctx := a.jobCtx; ctx != nil {
			context.AfterFunc(ctx, func() { _ = srv.Close() })
		}
	})
	return e.err
}

// startMLflow adds the job's run to the agent's endpoint and returns the
// variables the job gets.
func startMLflow(j *job) (*mlflowRun, map[string]string, error) {
	e := &j.a.mlflow
	if err := e.listen(j.a); err != nil {
		return nil, nil, err
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, nil, err
	}
	m := &mlflowRun{j: j, e: e, runID: j.as.Job, token: hex.EncodeToString(b), start: time.Now(),
		status: "RUNNING", params: map[string]string{}, tags: map[string]string{}, metrics: map[string]mlflowMetric{}}
	e.mu.Lock()
	e.runs[sha256.Sum256([]byte(m.token))] = m
	e.mu.Unlock()
	name := j.as.ExperimentName
	if name == "" {
		name = "Default"
	}
	env := map[string]string{
		"MLFLOW_TRACKING_URI":    "http://" + e.addr,
		"MLFLOW_TRACKING_TOKEN":  m.token,
		"MLFLOW_RUN_ID":          m.runID,
		"MLFLOW_EXPERIMENT_NAME": name,
		"MLFLOW_EXPERIMENT_ID":   mlflowExperimentID,
	}
	return m, env, nil
}

// close ends the run's part of the endpoint: its token is refused.
func (m *mlflowRun) close() {
	m.e.mu.Lock()
	delete(m.e.runs, sha256.Sum256([]byte(m.token)))
	m.e.mu.Unlock()
}

func mlflowError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_code": code, "message": msg})
}

func mlflowOK(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if v == nil {
		v = struct{}{}
	}
	_ = json.NewEncoder(w).Encode(v)
}

// serve answers a request the endpoint found m's token in (its SHA-256).
func (m *mlflowRun) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RunID     string          `json:"run_id"`
		RunUUID   string          `json:"run_uuid"`
		Key       string          `json:"key"`
		Value     json.RawMessage `json:"value"`
		Timestamp int64           `json:"timestamp"`
		Step      int64           `json:"step"`
		Status    string          `json:"status"`
		EndTime   int64           `json:"end_time"`
		Name      string          `json:"name"`
		Metrics   []mlflowMetric  `json:"metrics"`
		Params    []mlflowKV      `json:"params"`
		Tags      []mlflowKV      `json:"tags"`
		ModelJSON string          `json:"model_json"`
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			mlflowError(w, 400, "MALFORMED_REQUEST", "request body: "+err.Error())
			return
		}
	} else {
		q := r.URL.Query()
		body.RunID, body.RunUUID, body.Name = q.Get("run_id"), q.Get("run_uuid"), q.Get("experiment_name")
	}
	op := strings.TrimPrefix(r.URL.Path, "/api/2.0/mlflow/")
	if strings.HasPrefix(op, "runs/") && op != "runs/create" && op != "runs/search" {
		id := body.RunID
		if id == "" {
			id = body.RunUUID
		}
		if id != m.runID {
			mlflowError(w, 404, "RESOURCE_DOES_NOT_EXIST", fmt.Sprintf("run %q: this job's run is %q (MLFLOW_RUN_ID)", id, m.runID))
			return
		}
	}
	var err error
	switch op {
	case "experiments/get-by-name", "experiments/get":
		mlflowOK(w, map[string]any{"experiment": m.experiment(body.Name)})
		return
	case "experiments/create":
		mlflowOK(w, map[string]string{"experiment_id": mlflowExperimentID})
		return
	case "runs/get":
		mlflowOK(w, map[string]any{"run": m.run()})
		return
	case "runs/create":
		mlflowError(w, 400, "INVALID_PARAMETER_VALUE", fmt.Sprintf("tide: a job has one run, %s (MLFLOW_RUN_ID); new and nested runs are not supported yet: call mlflow.start_run() without arguments", m.runID))
		return
	case "runs/update":
		m.mu.Lock()
		if body.Status != "" {
			m.status = body.Status
		}
		if body.EndTime > 0 {
			m.end = time.UnixMilli(body.EndTime)
		}
		m.mu.Unlock()
		mlflowOK(w, map[string]any{"run_info": m.run()["info"]})
		return
	case "runs/log-metric":
		var v float64
		if err = json.Unmarshal(body.Value, &v); err == nil {
			err = m.logMetrics([]mlflowMetric{{Key: body.Key, Value: v, Timestamp: body.Timestamp, Step: body.Step}})
		}
	case "runs/log-parameter":
		var v string
		if err = json.Unmarshal(body.Value, &v); err == nil {
			err = m.logKV(runmetrics.KindParam, m.params, []mlflowKV{{body.Key, v}})
		}
	case "runs/set-tag":
		var v string
		if err = json.Unmarshal(body.Value, &v); err == nil {
			err = m.logKV(runmetrics.KindTag, m.tags, []mlflowKV{{body.Key, v}})
		}
	case "runs/log-batch":
		err = m.logMetrics(body.Metrics)
		if err == nil {
			err = m.logKV(runmetrics.KindParam, m.params, body.Params)
		}
		if err == nil {
			err = m.logKV(runmetrics.KindTag, m.tags, body.Tags)
		}
	case "runs/log-model", "runs/log-inputs":
		// autolog describes the model and datasets it logged; the files
		// themselves go to the run's artifact_uri, the job's outputs.
	default:
		mlflowError(w, 404, "ENDPOINT_NOT_FOUND", fmt.Sprintf("tide's MLflow endpoint does not serve %s %s yet; it serves experiments/get-by-name, runs/get, runs/update, runs/log-metric, runs/log-parameter, runs/set-tag and runs/log-batch", r.Method, op))
		return
	}
	if err != nil {
		mlflowError(w, 400, "INVALID_PARAMETER_VALUE", err.Error())
		return
	}
	mlflowOK(w, nil)
}

func (m *mlflowRun) experiment(name string) map[string]any {
	if name == "" {
		name = m.j.as.ExperimentName
	}
	return map[string]any{"experiment_id": mlflowExperimentID, "name": name, "artifact_location": m.artifactURI(), "lifecycle_stage": "active"}
}

// artifactURI is where mlflow writes the run's artifacts (models, plots):
// the job's outputs, kept with the job.
func (m *mlflowRun) artifactURI() string { return "file://" + m.j.outputsDir + "/mlflow" }

func (m *mlflowRun) run() map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	info := map[string]any{"run_id": m.runID, "run_uuid": m.runID, "run_name": m.runID, "experiment_id": mlflowExperimentID,
		"status": m.status, "start_time": m.start.UnixMilli(), "artifact_uri": m.artifactURI(), "lifecycle_stage": "active"}
	if !m.end.IsZero() {
		info["end_time"] = m.end.UnixMilli()
	}
	var metrics []mlflowMetric
	for _, v := range m.metrics {
		metrics = append(metrics, v)
	}
	sort.Slice(metrics, func(a, b int) bool { return metrics[a].Key < metrics[b].Key })
	return map[string]any{"info": info, "data": map[string]any{"metrics": metrics, "params": kvList(m.params), "tags": kvList(m.tags)}}
}

func kvList(m map[string]string) []mlflowKV {
	out := make([]mlflowKV, 0, len(m))
	for k, v := range m {
		out = append(out, mlflowKV{k, v})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key < out[b].Key })
	return out
}

// logMetrics writes the metrics as the job's own metric lines. All are
// checked before any is written, so a refused batch logs nothing.
func (m *mlflowRun) logMetrics(ms []mlflowMetric) error {
	for _, x := range ms {
		if x.Key == "step" {
			return fmt.Errorf("metric key \"step\" is reserved: tide's metric lines use step= for the step; name it e.g. train_step")
		}
		if !runmetrics.ValidName(x.Key) {
			return fmt.Errorf("metric key %q: tide's metric names are letters, digits, '_', '.', '-' and '/', starting with a letter or '_'", x.Key)
		}
		if math.IsNaN(x.Value) || math.IsInf(x.Value, 0) {
			return fmt.Errorf("metric %s: %v is not a finite number", x.Key, x.Value)
		}
		if x.Step < 0 {
			return fmt.Errorf("metric %s: step %d must be >= 0", x.Key, x.Step)
		}
	}
	for _, x := range ms {
		m.j.logs.add("stdout", api.MetricPrefix+x.Key+"="+strconv.FormatFloat(x.Value, 'g', -1, 64)+" step="+strconv.FormatInt(x.Step, 10))
		m.mu.Lock()
		if old, ok := m.metrics[x.Key]; !ok || x.Step >= old.Step {
			m.metrics[x.Key] = x
		}
		m.mu.Unlock()
	}
	return nil
}

// logKV writes params or tags as the job's ##tide param/tag lines.
func (m *mlflowRun) logKV(kind string, into map[string]string, kvs []mlflowKV) error {
	for _, kv := range kvs {
		if err := runmetrics.CheckProperty(kv.Key, kv.Value); err != nil {
			return fmt.Errorf("%s %s", kind, err)
		}
	}
	for _, kv := range kvs {
		m.j.logs.add("stdout", runmetrics.PropertyLine(kind, kv.Key, kv.Value))
		m.mu.Lock()
		into[kv.Key] = kv.Value
		m.mu.Unlock()
	}
	return nil
}
