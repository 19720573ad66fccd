package api

import "time"

// The agent protocol. An agent (tide agent) talks to the server over HTTP
// with its node token as the bearer token:
//
//	POST /v1/agent/register                  AgentHello -> AgentWelcome
//	GET  /v1/agent/stream                    server-sent events: "assign" (Assignment), "cancel" (Cancel)
//	POST /v1/agent/heartbeat                 AgentHeartbeat
//	POST /v1/agent/assignments/{id}/logs     LogBatch
//	PUT  /v1/agent/assignments/{id}/artifacts a tar.gz of the job's outputs/ and logs/ folders
//	POST /v1/agent/assignments/{id}/status   AssignmentStatus
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
}

// Capacity is what a node offers. On the local provider it is the size's
// logical capacity, which may exceed the host's (Note says so).
type Capacity struct {
	VCPUs    int     `json:"vcpus"`
	MemoryGB float64 `json:"memory_gb"`
	GPUs     int     `json:"gpus"`
	Note     string  `json:"note,omitempty"`
}

// AgentWelcome answers a registration.
type AgentWelcome struct {
	HeartbeatSeconds int `json:"heartbeat_seconds"`
	// Cancel lists assignments the agent reported running that the server
	// no longer wants (canceled or reassigned while it was away).
	Cancel []string `json:"cancel,omitempty"`
}

// AgentHeartbeat is sent periodically; Running lists assignment ids.
type AgentHeartbeat struct {
	NodeID  string   `json:"node_id"`
	Running []string `json:"running,omitempty"`
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
	Outputs        []string          `json:"outputs,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	ExperimentName string            `json:"experiment_name,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	GraceSeconds   int               `json:"grace_seconds,omitempty"`
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
}

// LogBatch carries log lines of one assignment.
type LogBatch struct {
	Lines []LogLine `json:"lines"`
}

// AssignmentStatus reports the state of an assignment on a node: Running
// once the process started; Completed, Failed or Canceled at the end, after
// the artifacts were uploaded.
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
}
