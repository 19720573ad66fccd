package api

import "time"

// The agent protocol. An agent (tide agent) talks to the server over HTTP
// with its node token as the bearer token:
//
//	POST /v1/agent/register                  AgentHello -> AgentWelcome
//	POST /v1/agent/stream                    body: one AgentHeartbeat a line; server-sent events: "assign" (Assignment),
//	                                         "cancel" (Cancel), and for each heartbeat in order "beat" (AgentHeartbeatReply)
//	                                         or "beat_error" (Problem)
//	GET  /v1/agent/stream                    the same events but "beat": for agents that heartbeat by request
//	POST /v1/agent/heartbeat                 AgentHeartbeat -> AgentHeartbeatReply (while no stream carries them)
//	POST /v1/agent/setup                     SetupReport (a compute instance's setup script ran)
//	POST /v1/agent/assignments/{id}/logs     LogBatch
//	PUT  /v1/agent/assignments/{id}/artifacts a tar.gz of the job's outputs/ and logs/ folders (unless they hold no bytes: AssignmentStatus.EmptyArtifacts)
//	POST /v1/agent/assignments/{id}/status   AssignmentStatus
//	GET  /v1/agent/blobs/{digest}            a code or data snapshot (tar.gz)
//	GET  /v1/agent/workspaces/{ws}/datastores/{name}   Datastore, to resolve azureml://datastores/ paths
//
// Assignments are pushed, never polled for: a warm dispatch costs one event
// loop turn in the controller plus a process start on the node.

// AgentHello registers an agent, or re-registers it after a reconnect, with
// what it is running, so that a server restart loses no job.
type AgentHello struct {
	NodeID   string             `json:"node_id"`
	Version  string             `json:"version,omitempty"`
	Capacity Capacity           `json:"capacity"`
	Address  string             `json:"address,omitempty"`
	Running  []AssignmentStatus `json:"running,omitempty"`
	// Runtime is how the agent runs jobs: "process", "docker" or "sandbox".
	Runtime string `json:"runtime,omitempty"`
	// SSHHostKey is the public host key of the node's SSH server
	// (authorized_keys format), which clients check.
	SSHHostKey string `json:"ssh_host_key,omitempty"`
}

// Capacity is what a node offers. On the local provider it is the size's
// logical capacity, which may exceed the host's (Note says so).
type Capacity struct {
	VCPUs    int     `json:"vcpus"`
	MemoryGB float64 `json:"memory_gb"`
	GPUs     int     `json:"gpus"`
	// GPUDevices are the host's GPUs this node may use (their indices),
	// when its provider gives nodes on one host disjoint devices; jobs
	// see only these (CUDA_VISIBLE_DEVICES, /dev/nvidiaN, Docker DeviceIDs).
	GPUDevices []string `json:"gpu_devices,omitempty"`
	Note       string   `json:"note,omitempty"`
}

// AgentWelcome answers a registration.
type AgentWelcome struct {
	HeartbeatSeconds int `json:"heartbeat_seconds"`
	// UnusableAfterMS is the server's unusable_after in milliseconds: a
	// node whose heartbeats stop that long is given up and its jobs are
	// retried elsewhere. The agent stops its jobs after half of it without
	// reaching the server, so that a retry never runs beside them. 0: the
	// agent does not stop them (an older server).
	UnusableAfterMS int64 `json:"unusable_after_ms,omitempty"`
	// MaxDataBytes bounds what the node fetches for one data input (the
	// server's max_data_size); 0 means no limit.
	MaxDataBytes int64 `json:"max_data_bytes,omitempty"`
	// Cancel lists assignments the agent reported running that the server
	// no longer wants (canceled or reassigned while it was away).
	Cancel []string `json:"cancel,omitempty"`
	// Instance is set when the node is a compute instance's: the setup
	// scripts to run and where Jupyter is served.
	Instance *InstanceSetup `json:"instance,omitempty"`
}

// AgentHeartbeat is sent periodically; Running lists assignment ids.
type AgentHeartbeat struct {
	NodeID  string   `json:"node_id"`
	Running []string `json:"running,omitempty"`
	// Activity is what an instance's agent measured: what keeps the
	// instance from being idle.
	Activity *NodeActivity `json:"activity,omitempty"`
	// Usage is what each running assignment used so far, by assignment ID.
	Usage map[string]JobUsage `json:"usage,omitempty"`
	// Utilization is the node's, at this heartbeat.
	Utilization *NodeUtilization `json:"utilization,omitempty"`
	// Cache is the node's cache of downloaded inputs.
	Cache *NodeCache `json:"cache,omitempty"`
	// Refused lists the assignments the agent refused since its last
	// heartbeat because it ran another: a node runs one at a time.
	Refused []string `json:"refused,omitempty"`
}

// AgentHeartbeatReply is the server's answer to a heartbeat: what the
// agent reports is reconciled with what the store says the node runs.
type AgentHeartbeatReply struct {
	// Cancel lists assignments the agent reported running that the store
	// does not place on its node (ended, or reassigned meanwhile): the
	// agent stops them.
	Cancel []string `json:"cancel,omitempty"`
	// Assign is the assignment the store places on the node when the
	// agent runs nothing (one it refused, or a push it missed).
	Assign *Assignment `json:"assign,omitempty"`
}

// Assignment tells an agent to run one node's share of a job attempt.
type Assignment struct {
	ID        string `json:"id"` // "<workspace>/<job>/<attempt>", unique per attempt
	Workspace string `json:"workspace"`
	Job       string `json:"job"`
	Attempt   int    `json:"attempt"`
	NodeRank  int    `json:"node_rank"`
	NodeCount int    `json:"node_count"`
	// Nodes are the addresses of every node of the gang, by rank.
	Nodes   []string `json:"nodes,omitempty"`
	Command string   `json:"command"`
	// Inputs are literal input values, bound into ${{inputs.NAME}}.
	Inputs map[string]string `json:"inputs,omitempty"`
	// Outputs are the names of outputs; each is bound to a folder under ./outputs.
	Outputs []string          `json:"outputs,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Masks are secret values the job's environment holds; the agent
	// replaces them with *** in the job's log.
	Masks []string `json:"masks,omitempty"`
	// IdentityToken is the token the job's code acts with
	// (TIDE_IDENTITY_TOKEN), for this attempt only; empty when the job acts
	// as nobody.
	IdentityToken  string `json:"identity_token,omitempty"`
	ExperimentName string `json:"experiment_name,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
	GraceSeconds   int    `json:"grace_seconds,omitempty"`
	// Code is the SHA-256 of the job's code snapshot (GET
	// /v1/agent/blobs/{digest}), unpacked as the job's working folder.
	Code string `json:"code,omitempty"`
	// Data are the job's uri_file and uri_folder inputs as the job gives
	// them (path: blob:, file://, http(s):// or azureml://datastores/);
	// the agent fetches each and binds ${{inputs.NAME}} to its local path.
	Data map[string]JobInput `json:"data,omitempty"`
	// FileOutputs are the outputs of type uri_file: ${{outputs.NAME}} is
	// then the file outputs/NAME/NAME rather than the folder.
	FileOutputs []string `json:"file_outputs,omitempty"`
	// OutputPaths are the outputs given a datastore path
	// (azureml://datastores/NAME/paths/P, placeholders expanded): the
	// agent uploads outputs/NAME there when the command ends.
	OutputPaths map[string]string `json:"output_paths,omitempty"`
	// Environment is the registered environment the job runs with, if any.
	Environment *Environment `json:"environment,omitempty"`
	// Distribution is the job's launcher; nil runs the command once per node.
	Distribution *Distribution `json:"distribution,omitempty"`
	// MasterPort is the rendezvous port on node 0 the launcher uses
	// (MASTER_PORT for pytorch, the first task's port for tensorflow).
	MasterPort int `json:"master_port,omitempty"`
	// Notes are lines the agent writes at the head of the job's log (for
	// example that the process runtime cannot honour environment.image).
	Notes []string `json:"notes,omitempty"`
	// Image is the environment's image, BuildPath its build context folder
	// (container runtimes only; the process runtime ignores them).
	Image     string `json:"image,omitempty"`
	BuildPath string `json:"build_path,omitempty"`
	// ShmSize is resources.shm_size ("2g"); container runtimes size /dev/shm with it.
	ShmSize string `json:"shm_size,omitempty"`
}

// Cancel asks an agent to stop an assignment: SIGTERM, then SIGKILL after
// GraceSeconds.
type Cancel struct {
	ID           string `json:"id"`
	Reason       string `json:"reason,omitempty"`
	GraceSeconds int    `json:"grace_seconds,omitempty"`
	// Preempt says the node is being taken away (a low-priority eviction):
	// the job is stopped the same way, its checkpoint folder is kept and
	// uploaded, and the attempt reports Preempted so it is retried.
	Preempt bool `json:"preempt,omitempty"`
}

// LogBatch carries log lines of one assignment.
type LogBatch struct {
	Lines []LogLine `json:"lines"`
}

// AssignmentStatus reports the state of an assignment on a node: Running
// once the process started; Completed, Failed or Canceled at the end, after
// the artifacts were uploaded (or, when empty, with their names).
type AssignmentStatus struct {
	ID       string    `json:"id"`
	NodeRank int       `json:"node_rank"`
	Status   string    `json:"status"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Error    string    `json:"error,omitempty"`
	Time     time.Time `json:"time,omitzero"`
	// LastNodeSeq is the last log line number the agent produced, so the
	// server knows when it has every line.
	LastNodeSeq int64 `json:"last_node_seq,omitempty"`
	// Preempted: the attempt ended because its node went away (preempted,
	// or its agent was stopped), not because of the job.
	Preempted bool `json:"preempted,omitempty"`
	// Usage is what the attempt used on this node, with its final status.
	Usage *JobUsage `json:"usage,omitempty"`
	// EmptyArtifacts stands for the artifacts upload when the job's
	// outputs/ and logs/ folders hold no bytes (a job that printed and
	// wrote nothing): the empty files, and the empty folders below
	// outputs/ (ending in "/"), by path below the job's folder
	// ("logs/std_log.txt", "outputs/model/"). The server keeps them as it
	// keeps an uploaded archive's, before it records the status. Final
	// statuses only; at most MaxEmptyArtifacts names.
	EmptyArtifacts []string `json:"empty_artifacts,omitempty"`
	// Started, on a final status, says the command started and its
	// Running status was not reported (it ended within the agent's short
	// wait before reporting it): the server records the start and the end
	// at once.
	Started bool `json:"started,omitempty"`
}

// MaxEmptyArtifacts bounds AssignmentStatus.EmptyArtifacts; an agent with
// more empty files uploads them as an archive.
const MaxEmptyArtifacts = 64
