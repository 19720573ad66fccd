package agent

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// environ is the job's environment: the node's (without the agent's
// token; only when inherit is set: a container has its image's), the user's environment_variables, then the variables Azure ML
// sets on its nodes and tide's own, which win so a job can rely on them.
//
//	AZUREML_RUN_ID                 job name
//	AZUREML_ARM_PROJECT_NAME       experiment name (Azure ML's name for it)
//	AZUREML_EXPERIMENT_NAME        experiment name (the obvious name)
//	AZUREML_ARM_WORKSPACE_NAME     workspace
//	AZUREML_NODE_COUNT             instance_count
//	AZUREML_CR_NODE_RANK, AZ_BATCHAI_TASK_INDEX, NODE_RANK   this node's rank
//	AZ_BATCH_HOST_LIST, AZ_BATCH_MASTER_NODE, AZ_BATCHAI_JOB_MASTER_NODE_IP   when the gang's addresses are known
//	AZURE_ML_INPUT_<name>, AZURE_ML_OUTPUT_<name>   input values, output folders
//	TIDE_WORKSPACE, TIDE_JOB_NAME, TIDE_ATTEMPT, TIDE_NODE_ID, TIDE_NODE_RANK,
//	TIDE_NODE_COUNT, TIDE_OUTPUTS_DIR, TIDE_LOGS_DIR, TIDE_CHECKPOINT_DIR
//	TIDE_NODE_DIR                  the node's folder (a compute instance's home, kept across stop and start)
//	TIDE_SERVER, TIDE_TOKEN, TIDE_IDENTITY_TOKEN, IDENTITY_ENDPOINT, IDENTITY_HEADER   when the job has an identity
//	MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_NAME/ID   the agent's MLflow endpoint (mlflow.go), added by execute
//
// A registered environment's tide block (variables, PATH) applies before
// the user's environment_variables; launcher variables (MASTER_ADDR, RANK,
// TF_CONFIG, ...) are added per process (see planLaunch). With inherit
// false (a container runtime) the node's own variables are left out.
func (j *job) environ(inherit bool) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if !inherit {
			break
		}
		if k, v, _ := strings.Cut(kv, "="); inheritable(k) {
			env[k] = v
		}
	}
	if inherit {
		// The job's own home on the node, not the agent's (whose HOME
		// holds the CLI's configuration and its token).
		env["HOME"] = j.a.home()
	}
	if err := hostEnvironment(j.as.Environment, env, filepath.Join(j.dir, ".tide", "bin"), inherit); err != nil {
		return nil, err
	}
	for k, v := range j.as.Env {
		env[k] = v
	}
	as := j.as
	count := max(as.NodeCount, 1)
	rank := strconv.Itoa(as.NodeRank)
	set := map[string]string{
		"AZUREML_RUN_ID":             as.Job,
		"AZUREML_ARM_PROJECT_NAME":   as.ExperimentName,
		"AZUREML_EXPERIMENT_NAME":    as.ExperimentName,
		"AZUREML_ARM_WORKSPACE_NAME": as.Workspace,
		"AZUREML_NODE_COUNT":         strconv.Itoa(count),
		"AZUREML_CR_NODE_RANK":       rank,
		"AZ_BATCHAI_TASK_INDEX":      rank,
		"NODE_RANK":                  rank,
		"TIDE_WORKSPACE":             as.Workspace,
		"TIDE_JOB_NAME":              as.Job,
		"TIDE_ATTEMPT":               strconv.Itoa(as.Attempt),
		"TIDE_NODE_ID":               j.a.cfg.NodeID,
		"TIDE_NODE_RANK":             rank,
		"TIDE_NODE_COUNT":            strconv.Itoa(count),
		"TIDE_OUTPUTS_DIR":           j.outputsDir,
		"TIDE_LOGS_DIR":              j.logsDir,
		"TIDE_CHECKPOINT_DIR":        j.checkpointDir,
		"TIDE_NODE_DIR":              j.a.cfg.Dir,
	}
	if tok := as.IdentityToken; tok != "" && len(j.a.cfg.ServerURLs) > 0 {
		// The job acts as its identity: the tide CLI and SDK read
		// TIDE_SERVER/TIDE_TOKEN, code written for Azure's managed
		// identity reads IDENTITY_ENDPOINT/IDENTITY_HEADER.
		server := strings.TrimSuffix(j.a.cfg.ServerURLs[0], "/")
		set["TIDE_SERVER"] = server
		set["TIDE_TOKEN"] = tok
		set["TIDE_IDENTITY_TOKEN"] = tok
		set["IDENTITY_ENDPOINT"] = server + "/v1/identity/token"
		set["IDENTITY_HEADER"] = tok
	}
	if devs := j.a.cfg.Capacity.GPUDevices; len(devs) > 0 && j.a.cfg.RuntimeName != "docker" {
		// The node's own GPUs: nodes sharing a host never share one. (A
		// container sees only its devices, numbered from 0: the docker
		// runtime asks for them by DeviceIDs instead.)
		set["CUDA_VISIBLE_DEVICES"] = strings.Join(devs, ",")
		set["NVIDIA_VISIBLE_DEVICES"] = strings.Join(devs, ",")
	}
	if len(as.Nodes) > 0 {
		set["AZ_BATCH_HOST_LIST"] = strings.Join(as.Nodes, ",")
		set["AZ_BATCH_MASTER_NODE"] = as.Nodes[0]
		host := as.Nodes[0]
		if h, _, ok := strings.Cut(host, ":"); ok {
			host = h
		}
		set["AZ_BATCHAI_JOB_MASTER_NODE_IP"] = host
	}
	// Only the job's own goroutine writes j.as.Inputs (prepareData), so
	// it reads them without j.mu, which the caller may hold.
	for k, v := range j.as.Inputs {
		set["AZURE_ML_INPUT_"+k] = v
	}
	for o, p := range j.outputPaths() {
		set["AZURE_ML_OUTPUT_"+o] = p
	}
	for k, v := range set {
		env[k] = v
	}
	return env, nil
}

// inheritedEnv are the agent's environment variables a job on the host
// inherits: what programs need to run (search path, locale, time zone,
// temporary folder, proxies, certificates, libraries, thread settings),
// never the server's or the agent's own (TIDE_*, XDG_*, HOME, tokens,
// credentials a provider or the operator's shell passed).
var inheritedEnv = []string{"PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "USER", "LOGNAME", "SHELL",
	"LD_LIBRARY_PATH", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// inheritedPrefixes are families of settings jobs inherit: locale, and the
// math and GPU libraries' (OPENBLAS_CORETYPE avoids wrong results on some
// processors).
var inheritedPrefixes = []string{"LC_", "OPENBLAS_", "OMP_", "MKL_", "CUDA_", "NVIDIA_"}

func inheritable(k string) bool {
	if slices.Contains(inheritedEnv, k) {
		return true
	}
	for _, p := range inheritedPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// envList is env with extra on top, as sorted KEY=value lines.
func envList(env, extra map[string]string) []string {
	out := make([]string, 0, len(env)+len(extra))
	for k, v := range env {
		if _, ok := extra[k]; !ok {
			out = append(out, k+"="+v)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
