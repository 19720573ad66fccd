package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Job statuses, as in Azure ML.
const (
	JobNotStarted      = "NotStarted"
	JobQueued          = "Queued"
	JobPreparing       = "Preparing"
	JobRunning         = "Running"
	JobFinalizing      = "Finalizing"
	JobCompleted       = "Completed"
	JobFailed          = "Failed"
	JobCanceled        = "Canceled"
	JobCancelRequested = "CancelRequested"
	JobNotResponding   = "NotResponding"
)

// JobTerminal reports whether a job in status s will not change again.
func JobTerminal(s string) bool {
	return s == JobCompleted || s == JobFailed || s == JobCanceled
}

// Job is an Azure ML command job. The first block is what the user writes in
// YAML; the second is status set by the server.
type Job struct {
	Name                 string               `json:"name"`
	Type                 string               `json:"type"`
	DisplayName          string               `json:"display_name,omitempty"`
	ExperimentName       string               `json:"experiment_name,omitempty"`
	Description          string               `json:"description,omitempty"`
	Tags                 map[string]string    `json:"tags,omitempty"`
	Command              string               `json:"command"`
	Code                 string               `json:"code,omitempty"`
	Environment          *JobEnvironment      `json:"environment,omitempty"`
	EnvironmentVariables map[string]string    `json:"environment_variables,omitempty"`
	Inputs               map[string]JobInput  `json:"inputs,omitempty"`
	Outputs              map[string]JobOutput `json:"outputs,omitempty"`
	Compute              string               `json:"compute"`
	Resources            *JobResources        `json:"resources,omitempty"`
	Distribution         *Distribution        `json:"distribution,omitempty"`
	Limits               *JobLimits           `json:"limits,omitempty"`
	QueueSettings        *QueueSettings       `json:"queue_settings,omitempty"`
	// Identity is whom the job's code acts as (see JobIdentity).
	Identity *JobIdentity `json:"identity,omitempty"`
	// Tide holds tide's own settings (retries), under `tide:` in YAML.
	Tide *JobExtensions `json:"tide,omitempty"`

	// Pipeline jobs (type pipeline): the steps by name, each a command
	// job whose inputs may bind ${{parent.inputs.X}} and
	// ${{parent.jobs.STEP.outputs.Y}}, and the settings.
	Jobs     map[string]*Job   `json:"jobs,omitempty"`
	Settings *PipelineSettings `json:"settings,omitempty"`
	// Component is what a pipeline step runs, when it is not an inline
	// command.
	Component *Component `json:"component,omitempty"`

	// Sweep jobs (type sweep): the trial (a command job whose command may
	// bind ${{search_space.X}}), the search space, how to sample it, the
	// metric to optimise and when to stop trials early. Limits holds the
	// trial limits.
	Trial            *Job                  `json:"trial,omitempty"`
	SearchSpace      map[string]SearchDist `json:"search_space,omitempty"`
	Sampling         *Sampling             `json:"sampling_algorithm,omitempty"`
	Objective        *Objective            `json:"objective,omitempty"`
	EarlyTermination *EarlyTermination     `json:"early_termination,omitempty"`

	// Status, set by the server.
	ID        string    `json:"id,omitempty"`
	Workspace string    `json:"workspace,omitempty"`
	Status    string    `json:"status,omitempty"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	// CreatedBy is the user who submitted the job.
	CreatedBy string    `json:"created_by,omitempty"`
	StartTime time.Time `json:"start_time,omitzero"`
	EndTime   time.Time `json:"end_time,omitzero"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Error     string    `json:"error,omitempty"`
	LogTail   []string  `json:"log_tail,omitempty"`
	// Ranks are the job's nodes, by node rank, with what each reported.
	Ranks []JobRank `json:"ranks,omitempty"`
	// Attempt counts the times the job was started, from 1.
	Attempt int `json:"attempt,omitempty"`
	// EmptyArtifacts are empty files and folders among the job's
	// artifacts (paths below them; folders end in "/") that the nodes of
	// its first attempt reported instead of uploading them. The server
	// keeps them here, not in its files; its artifacts list, downloads
	// and the next pipeline step see them beside the stored files, and a
	// stored file of the same name wins (a later attempt's).
	EmptyArtifacts []string `json:"empty_artifacts,omitempty"`
	// Retried counts the attempts that ended badly and were retried.
	Retried       JobRetryCounts `json:"retried,omitzero"`
	PendingReason string         `json:"pending_reason,omitempty"`
	// QueuePosition is a queued job's place in its compute's queue (1:
	// next), in the order the scheduler takes jobs: priority, then age.
	QueuePosition int `json:"queue_position,omitempty"`
	// ResolvedEnvironment is the registered environment the job's
	// environment reference named when it was submitted; the job keeps it
	// even if that version is deleted later.
	ResolvedEnvironment *Environment `json:"resolved_environment,omitempty"`
	// Parent names the pipeline job this job is a step of (Step names
	// the step) or the sweep job it is a trial of.
	Parent string `json:"parent,omitempty"`
	Step   string `json:"step,omitempty"`
	// Steps are a pipeline job's steps, in an order that runs a step after
	// the steps it depends on.
	Steps []PipelineStep `json:"steps,omitempty"`
	// Trials are a sweep's trials in the order they started, and
	// BestTrial the job of the best one so far.
	Trials    []SweepTrial `json:"trials,omitempty"`
	BestTrial string       `json:"best_trial,omitempty"`
	// Parameters are a sweep trial's values of the search space (its
	// sweep is Parent).
	Parameters map[string]string `json:"parameters,omitempty"`
	// ReuseKey identifies a step job's work (component, code, environment,
	// inputs by content); a later step with the same key may reuse it.
	ReuseKey string `json:"reuse_key,omitempty"`
	// Cost is what the job's runs cost so far: its nodes' time while it
	// ran, at its compute's price.
	Cost *Cost `json:"cost,omitempty"`
	// Usage sums what the job's ranks used (CPU time added up, the
	// largest peak memory, the mean GPU utilisation).
	Usage *JobUsage `json:"usage,omitempty"`
	// Metrics are the latest value of each metric the job logged
	// (tide job metrics lists the series).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Params are the parameters the job logged (mlflow.log_param, or a
	// printed ##tide param line); the tags it set the same way go to Tags.
	Params map[string]string `json:"params,omitempty"`
	// Serverless describes the nodes of a serverless job (one whose file
	// names no compute, or compute: serverless): Compute then names the
	// hidden compute that holds them for this job only.
	Serverless *JobServerless `json:"serverless,omitempty"`
	Etag       string         `json:"etag,omitempty"`
}

// JobServerless is what a serverless job runs on: nodes created for it
// alone and deleted when it ends.
type JobServerless struct {
	// InstanceType is the nodes' VM size (resources.instance_type, or the
	// server's default).
	InstanceType string `json:"instance_type"`
	// InstanceCount is how many nodes the job gets.
	InstanceCount int `json:"instance_count"`
	// Tier is low_priority (job_tier spot) or dedicated.
	Tier string `json:"tier"`
	// Location is where the nodes come from (the workspace's serverless
	// location, or the attached Kubernetes cluster's).
	Location string `json:"location"`
	// Kubernetes names the attached Kubernetes compute (the job's
	// compute:) whose Pods of InstanceType the job runs on; empty for a
	// serverless job.
	Kubernetes string `json:"kubernetes,omitempty"`
}

// JobRank is one node of a running or finished job attempt.
type JobRank struct {
	Node     string `json:"node"`
	Status   string `json:"status,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	// LastNodeSeq is the last log line the node produced (0 while running).
	LastNodeSeq int64 `json:"last_node_seq,omitempty"`
	// NodeFailure: the rank ended because its node was preempted or became
	// unusable, not because of the job's command.
	NodeFailure bool `json:"node_failure,omitempty"`
	// Usage is what the rank used on its node: reported with each
	// heartbeat while it runs, final once it ended.
	Usage *JobUsage `json:"usage,omitempty"`
}

// Artifact is one file a job kept (under outputs/ or logs/).
type Artifact struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// InstanceCount is the number of nodes the job runs on (at least 1).
func (j *Job) InstanceCount() int {
	if j.Resources == nil || j.Resources.InstanceCount < 1 {
		return 1
	}
	return j.Resources.InstanceCount
}

// JobEnvironment is either a reference to a registered environment
// ("azureml:NAME:VERSION", "azureml:NAME@latest") or an inline one.
type JobEnvironment struct {
	Ref       string `json:"-"`
	Image     string `json:"image,omitempty"`
	CondaFile string `json:"conda_file,omitempty"`
	// Build is a Docker build context to build the image from, instead of Image.
	Build *BuildContext `json:"build,omitempty"`
}

// BuildContext is an environment's Docker build context. Path is a folder
// holding a Dockerfile; the CLI makes a relative path absolute (relative
// to the job's YAML file), and the node builds it, so it must be a folder
// the node can read.
type BuildContext struct {
	Path string `json:"path"`
}

// MarshalJSON writes a reference as a string and an inline environment as an object.
func (e JobEnvironment) MarshalJSON() ([]byte, error) {
	if e.Ref != "" {
		return json.Marshal(e.Ref)
	}
	type inline JobEnvironment
	return json.Marshal(inline(e))
}

// UnmarshalJSON accepts a string reference or an inline object.
func (e *JobEnvironment) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &e.Ref)
	}
	type inline JobEnvironment
	var v inline
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = JobEnvironment(v)
	return nil
}

// Input types.
const (
	InputLiteral   = "literal"
	InputURIFile   = "uri_file"
	InputURIFolder = "uri_folder"
	// Models and tables are folders, as in Azure ML: an MLflow model's
	// folder holds its MLmodel file, an mltable's its MLTable file.
	InputMLflowModel = "mlflow_model"
	InputCustomModel = "custom_model"
	InputTritonModel = "triton_model"
	InputMLTable     = "mltable"
)

// IsDataType reports whether t is a type of input or output that is data
// (a path), not a literal value.
func IsDataType(t string) bool {
	switch t {
	case InputURIFile, InputURIFolder, InputMLflowModel, InputCustomModel, InputTritonModel, InputMLTable:
		return true
	}
	return false
}

// IsFolderType reports whether data of type t is a folder: every data
// type but uri_file.
func IsFolderType(t string) bool { return IsDataType(t) && t != InputURIFile }

// EvaluatedMode returns the mode an MLTable evaluation mode is built on:
// eval_mount reads the files its table names as ro_mount does, and
// eval_download copies them as download does. ok is false for any other
// mode.
func EvaluatedMode(mode string) (base string, ok bool) {
	switch mode {
	case "eval_mount":
		return "ro_mount", true
	case "eval_download":
		return "download", true
	}
	return "", false
}

// JobInput is a literal value (a string, number or boolean in YAML) or a data
// input with a type, a path and a mode.
type JobInput struct {
	Type  string `json:"type,omitempty"`
	Path  string `json:"path,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Value string `json:"value,omitempty"`
}

// MarshalJSON writes a literal as its bare value, as the YAML has it.
func (in JobInput) MarshalJSON() ([]byte, error) {
	if in.Type == InputLiteral || in.Type == "" {
		return json.Marshal(in.Value)
	}
	type obj JobInput
	return json.Marshal(obj(in))
}

// UnmarshalJSON accepts a bare value (string, number, boolean) or an object.
func (in *JobInput) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		type obj JobInput
		var v obj
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*in = JobInput(v)
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		in.Value = x
	case float64, bool:
		in.Value = string(b)
	default:
		return fmt.Errorf("input must be a string, number, boolean or object, got %s", string(b))
	}
	in.Type = InputLiteral
	return nil
}

// JobOutput is a named output: a folder (or file) the job writes.
type JobOutput struct {
	Type string `json:"type,omitempty"`
	Mode string `json:"mode,omitempty"`
	Path string `json:"path,omitempty"`
	// Bind, in a pipeline step, is ${{parent.outputs.NAME}}: the step's
	// output is the pipeline's output NAME.
	Bind string `json:"-"`
}

// JobResources is the job's shape on its compute.
type JobResources struct {
	// InstanceType is the VM size of a serverless job's nodes; a job on a
	// compute runs on the compute's size, as in Azure, which ignores it.
	InstanceType  string `json:"instance_type,omitempty"`
	InstanceCount int    `json:"instance_count,omitempty"`
	ShmSize       string `json:"shm_size,omitempty"`
}

// Distribution configures a distributed launcher.
type Distribution struct {
	Type                    string `json:"type"`
	ProcessCountPerInstance int    `json:"process_count_per_instance,omitempty"`
	WorkerCount             int    `json:"worker_count,omitempty"`
	ParameterServerCount    int    `json:"parameter_server_count,omitempty"`
}

// JobLimits bounds a job.
type JobLimits struct {
	// Timeout is the job's maximum run time in seconds (a sweep's: of the
	// whole sweep).
	Timeout int `json:"timeout,omitempty"`
	// Sweeps only: how many trials to run in all and at once, and each
	// trial's maximum run time in seconds.
	MaxTotalTrials      int `json:"max_total_trials,omitempty"`
	MaxConcurrentTrials int `json:"max_concurrent_trials,omitempty"`
	TrialTimeout        int `json:"trial_timeout,omitempty"`
}

// Node states, as in Azure ML (lower case, as its node lists print them).
const (
	NodePreparing = "preparing"
	NodeIdle      = "idle"
	NodeRunning   = "running"
	NodeLeaving   = "leaving"
	NodePreempted = "preempted"
	NodeUnusable  = "unusable"
)

// Node is one agent of a compute.
type Node struct {
	ID         string  `json:"id"`
	Compute    string  `json:"compute"`
	Workspace  string  `json:"workspace"`
	Location   string  `json:"location"`
	Provider   string  `json:"provider"`
	ProviderID string  `json:"provider_id,omitempty"`
	State      string  `json:"state"`
	Job        string  `json:"job,omitempty"`
	VCPUs      int     `json:"vcpus"`
	MemoryGB   float64 `json:"memory_gb"`
	GPUs       int     `json:"gpus"`
	// GPUDevices are the host GPUs the node's jobs see (indices), when
	// its provider assigns them.
	GPUDevices []string  `json:"gpu_devices,omitempty"`
	Address    string    `json:"address,omitempty"`
	CreatedOn  time.Time `json:"created_on,omitzero"`
	StateSince time.Time `json:"state_since,omitzero"`
	// RegisteredOn is when the node's agent first registered: with
	// CreatedOn, how long the node took to start.
	RegisteredOn  time.Time `json:"registered_on,omitzero"`
	LastHeartbeat time.Time `json:"last_heartbeat,omitzero"`
	Error         string    `json:"error,omitempty"`
	Runtime       string    `json:"runtime,omitempty"` // how the node runs jobs, as its agent reported it
	// Activity is what the agent last measured (instances' nodes);
	// ActiveAt is when it last reported the node busy.
	Activity *NodeActivity `json:"activity,omitempty"`
	ActiveAt time.Time     `json:"active_at,omitzero"`
	// PricePerHour is the node's price (its size's, for the compute's
	// tier) when it was created; its cost is this times its life.
	PricePerHour float64 `json:"price_per_hour,omitempty"`
	// Utilization is what the node used at its last heartbeat, and
	// JobUsage what the job it runs used so far.
	Utilization *NodeUtilization `json:"utilization,omitempty"`
	JobUsage    *JobUsage        `json:"job_usage,omitempty"`
	// Cache is the node's cache of downloaded inputs at its last heartbeat.
	Cache *NodeCache `json:"cache,omitempty"`
	// Connection is an OpenSSH command line that reaches the node through
	// the server, or why there is none (in responses).
	Connection string `json:"connection,omitempty"`
	// SSHHostKey is the public host key of the node's SSH server, as its
	// agent reported it: tide compute connect-ssh checks the node with it.
	SSHHostKey string `json:"ssh_host_key,omitempty"`
}

// LogLine is one line of a job's log. The agent numbers the lines of one
// attempt on one node with NodeSeq (dense, from 1) so that a batch resent
// after a reconnect is stored once; the store assigns Seq, dense per job from
// 1, which is the cursor clients resume from (SSE Last-Event-ID).
type LogLine struct {
	Seq     int64     `json:"seq"`
	Attempt int       `json:"attempt"`
	Node    int       `json:"node"`
	NodeSeq int64     `json:"node_seq"`
	Time    time.Time `json:"time"`
	Stream  string    `json:"stream,omitempty"`
	Text    string    `json:"text"`
}

// Display is the line as tide shows it: on a job of several nodes
// (multiNode) the text is prefixed with its node's rank, "[node-K] ", so
// the nodes' outputs can be told apart wherever the log is printed.
func (l LogLine) Display(multiNode bool) string {
	if !multiNode {
		return l.Text
	}
	return fmt.Sprintf("[node-%d] %s", l.Node, l.Text)
}

// Event is something that happened to a compute or a job.
type Event struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}
