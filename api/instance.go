package api

import "time"

// ComputeTypeInstance is Azure ML's compute instance: one node a person
// works on (SSH, Jupyter), that jobs may target, that stops itself when
// idle and starts and stops on schedules.
const ComputeTypeInstance = "computeinstance"

// Compute instance states, as Azure ML names them.
const (
	InstanceCreating        = "Creating"
	InstanceCreateFailed    = "CreateFailed"
	InstanceRunning         = "Running"
	InstanceJobRunning      = "JobRunning"
	InstanceStarting        = "Starting"
	InstanceStopping        = "Stopping"
	InstanceStopped         = "Stopped"
	InstanceRestarting      = "Restarting"
	InstanceSettingUp       = "SettingUp"
	InstanceSetupFailed     = "SetupFailed"
	InstanceUserSettingUp   = "UserSettingUp"
	InstanceUserSetupFailed = "UserSetupFailed"
	InstanceDeleting        = "Deleting"
	InstanceUnusable        = "Unusable"
)

// Operations and their triggers in LastOperation, as Azure ML names them.
const (
	OperationCreate  = "Create"
	OperationStart   = "Start"
	OperationStop    = "Stop"
	OperationRestart = "Restart"
	OperationDelete  = "Delete"

	OperationInProgress = "InProgress"
	OperationSucceeded  = "Succeeded"

	TriggerUser         = "User"
	TriggerSchedule     = "Schedule"
	TriggerIdleShutdown = "IdleShutdown"
)

// Instance holds what only a compute instance has. Its first block is what
// the user writes (at the top level of the YAML file, as Azure's schema has
// it); the second is status the server maintains.
type Instance struct {
	// IdleTimeBeforeShutdown is Azure's ISO 8601 duration ("PT30M");
	// IdleTimeBeforeShutdownMinutes the same in minutes. Zero: never.
	IdleTimeBeforeShutdown        string            `json:"idle_time_before_shutdown,omitempty"`
	IdleTimeBeforeShutdownMinutes int               `json:"idle_time_before_shutdown_minutes,omitempty"`
	SetupScripts                  *SetupScripts     `json:"setup_scripts,omitempty"`
	CreateOnBehalfOf              *AssignedUser     `json:"create_on_behalf_of,omitempty"`
	Schedules                     *ComputeSchedules `json:"schedules,omitempty"`

	// Status, set by the server.
	State         string         `json:"state,omitempty"`
	LastOperation *LastOperation `json:"last_operation,omitempty"`
	// Desired is what the last operation asked for: Running or Stopped.
	Desired      string        `json:"desired_state,omitempty"`
	Applications []Application `json:"applications,omitempty"`
	// Setup is the last run of each setup script, with its log.
	Setup []SetupRun `json:"setup,omitempty"`
	// Node is the instance's node id (stable across stop and start, so
	// its folder survives).
	Node string `json:"node,omitempty"`
	// Connection says how to reach the instance.
	Connection *InstanceConnection `json:"connection,omitempty"`
	// Activity is what the node's agent last reported (in responses).
	Activity *NodeActivity `json:"activity,omitempty"`
}

// SetupScripts are the scripts an instance runs: CreationScript once, on
// its first start; StartupScript on every start.
type SetupScripts struct {
	CreationScript *SetupScript `json:"creation_script,omitempty"`
	StartupScript  *SetupScript `json:"startup_script,omitempty"`
}

// SetupScript is a script file (Path, relative to the YAML file) or an
// inline command. The CLI sends a file's text as Content, since the
// server cannot read the caller's files.
type SetupScript struct {
	Path           string `json:"path,omitempty"`
	Command        string `json:"command,omitempty"`
	TimeoutMinutes int    `json:"timeout_minutes,omitempty"`
	Content        string `json:"content,omitempty"`
}

// AssignedUser is the user an instance is created for.
type AssignedUser struct {
	UserTenantID string `json:"user_tenant_id"`
	UserObjectID string `json:"user_object_id"`
}

// ComputeSchedules holds an instance's start and stop schedules.
type ComputeSchedules struct {
	ComputeStartStop []StartStopSchedule `json:"compute_start_stop"`
}

// StartStopSchedule starts or stops an instance (or, on a cluster, sets
// its node counts) when its trigger fires.
type StartStopSchedule struct {
	// Action is "start" or "stop" (instances only).
	Action string `json:"action,omitempty"`
	// State is "enabled" (the default) or "disabled".
	State   string   `json:"state,omitempty"`
	Trigger *Trigger `json:"trigger"`
	// MinInstances and MaxInstances are what a cluster schedule sets.
	MinInstances *int `json:"min_instances,omitempty"`
	MaxInstances *int `json:"max_instances,omitempty"`
	// NextRun is when it fires next (status).
	NextRun time.Time `json:"next_run,omitzero"`
}

// Trigger is a cron or a recurrence trigger.
type Trigger struct {
	// Type is "cron" or "recurrence".
	Type string `json:"type"`
	// Expression is a 5-field cron expression (cron triggers).
	Expression string `json:"expression,omitempty"`
	// Frequency (minute, hour, day, week, month), Interval and Schedule
	// describe a recurrence.
	Frequency string              `json:"frequency,omitempty"`
	Interval  int                 `json:"interval,omitempty"`
	Schedule  *RecurrenceSchedule `json:"schedule,omitempty"`
	// StartTime ("2021-03-10T21:21:07", in TimeZone) is when the
	// trigger begins to fire; TimeZone a Windows or IANA name (default UTC).
	StartTime string `json:"start_time,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"`
}

// RecurrenceSchedule is when a recurrence fires within its period.
type RecurrenceSchedule struct {
	Hours     []int    `json:"hours"`
	Minutes   []int    `json:"minutes"`
	WeekDays  []string `json:"week_days,omitempty"`
	MonthDays []int    `json:"month_days,omitempty"`
}

// LastOperation is the last operation on an instance.
type LastOperation struct {
	OperationName    string    `json:"operation_name"`
	OperationTime    time.Time `json:"operation_time"`
	OperationStatus  string    `json:"operation_status"`
	OperationTrigger string    `json:"operation_trigger"`
	// Reason says why (an idle shutdown's measurements, a schedule).
	Reason string `json:"reason,omitempty"`
}

// Application is one application of an instance.
type Application struct {
	DisplayName string `json:"display_name"`
	EndpointURI string `json:"endpoint_uri,omitempty"`
	// Available is false when the application cannot run; Reason says why.
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// SetupRun is one run of a setup script.
type SetupRun struct {
	Script   string    `json:"script"` // "creation_script" or "startup_script"
	Status   string    `json:"status"` // Running, Succeeded or Failed
	ExitCode *int      `json:"exit_code,omitempty"`
	Error    string    `json:"error,omitempty"`
	Log      string    `json:"log,omitempty"`
	Time     time.Time `json:"time,omitzero"`
}

// InstanceConnection says how to reach an instance.
type InstanceConnection struct {
	Node    string `json:"node,omitempty"`
	Address string `json:"address,omitempty"`
	// SSH is the connect-ssh command, or why there is none.
	SSH string `json:"ssh,omitempty"`
}

// NodeActivity is what an agent measured since its last report: what
// makes an instance busy.
type NodeActivity struct {
	// CPUPercent is the CPU the node's processes used (percent of one core).
	CPUPercent float64 `json:"cpu_percent"`
	// Kernels counts Jupyter kernels; KernelsBusy those executing;
	// Connections the open kernel connections.
	Kernels     int `json:"kernels"`
	KernelsBusy int `json:"kernels_busy"`
	Connections int `json:"connections"`
	// SSHSessions counts SSH connections: the most open at once since the
	// last report, so a short one still counts.
	SSHSessions int `json:"ssh_sessions"`
	// Jupyter says how the node's Jupyter server runs: its port (on the
	// node's address) and token, or why there is none.
	Jupyter *JupyterServer `json:"jupyter,omitempty"`
}

// JupyterServer is a Jupyter server an agent runs.
type JupyterServer struct {
	Port   int    `json:"port,omitempty"`
	Token  string `json:"token,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// InstanceSetup tells an instance's agent what to run at start.
type InstanceSetup struct {
	CreationScript *SetupScript `json:"creation_script,omitempty"`
	StartupScript  *SetupScript `json:"startup_script,omitempty"`
	// JupyterBaseURL is the path the server proxies Jupyter under.
	JupyterBaseURL string `json:"jupyter_base_url,omitempty"`
}

// SetupReport is an agent's report of a setup script run.
type SetupReport struct {
	Script   string `json:"script"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	Log      string `json:"log,omitempty"`
}

// IsInstance reports whether c is a compute instance.
func (c *Compute) IsInstance() bool { return c.Type == ComputeTypeInstance }
