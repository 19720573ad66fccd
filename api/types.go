// Package api holds tide's public request and response types and the Go
// client that the CLI, Studio and outside programs share. JSON field names
// are the snake_case names of Azure ML's YAML files, so a user reads an API
// object the way they read the file they wrote.
package api

import "time"

// Compute types tide accepts (with ComputeTypeInstance and
// ComputeTypeVirtualMachine). Other Azure ML types are rejected with a clear
// "not supported yet" until tide implements them.
const (
	ComputeTypeAmlCompute = "amlcompute"
)

// Compute tiers, as in Azure ML.
const (
	TierDedicated   = "dedicated"
	TierLowPriority = "low_priority"
)

// Provisioning states of a compute.
const (
	ProvisioningCreating  = "Creating"
	ProvisioningSucceeded = "Succeeded"
	ProvisioningFailed    = "Failed"
	ProvisioningUpdating  = "Updating"
	ProvisioningDeleting  = "Deleting"
)

// Allocation states of a compute.
const (
	AllocationSteady   = "Steady"
	AllocationResizing = "Resizing"
)

// Compute is an Azure ML compute cluster (type amlcompute). The first block of
// fields is what the user writes in YAML; the second is status the server
// maintains and the user cannot set.
type Compute struct {
	Name                    string            `json:"name"`
	Type                    string            `json:"type"`
	Description             string            `json:"description,omitempty"`
	Tags                    map[string]string `json:"tags,omitempty"`
	Location                string            `json:"location"`
	Size                    string            `json:"size"`
	Tier                    string            `json:"tier"`
	MinInstances            int               `json:"min_instances"`
	MaxInstances            int               `json:"max_instances"`
	IdleTimeBeforeScaleDown int               `json:"idle_time_before_scale_down"`
	SSHPublicAccessEnabled  *bool             `json:"ssh_public_access_enabled,omitempty"`
	SSHSettings             *SSHSettings      `json:"ssh_settings,omitempty"`
	NetworkSettings         *NetworkSettings  `json:"network_settings,omitempty"`
	Identity                *Identity         `json:"identity,omitempty"`
	EnableNodePublicIP      *bool             `json:"enable_node_public_ip,omitempty"`
	// Tide holds tide's extensions to Azure's compute schema; nil when the
	// file sets none.
	Tide *ComputeExtensions `json:"tide,omitempty"`
	// Instance holds the fields of a compute instance (type
	// computeinstance), flattened into the compute as Azure's file has them.
	*Instance
	// VirtualMachine holds the fields of an attached machine (type
	// virtualmachine), flattened as Azure's file has them.
	*VirtualMachine
	// Kubernetes holds the fields of an attached Kubernetes cluster (type
	// kubernetes), flattened as Azure's file has them.
	*Kubernetes

	// Status, set by the server.
	ID string `json:"id,omitempty"`
	// Runtime is how jobs run on the compute's nodes: its location's
	// runtime ("process", "docker" or "sandbox").
	Runtime           string          `json:"runtime,omitempty"`
	Workspace         string          `json:"workspace,omitempty"`
	ProvisioningState string          `json:"provisioning_state,omitempty"`
	AllocationState   string          `json:"allocation_state,omitempty"`
	CurrentNodeCount  int             `json:"current_node_count"`
	TargetNodeCount   int             `json:"target_node_count"`
	NodeStateCounts   NodeStateCounts `json:"node_state_counts"`
	CreatedOn         time.Time       `json:"created_on,omitzero"`
	ModifiedOn        time.Time       `json:"modified_on,omitzero"`
	Errors            []ErrorDetail   `json:"errors,omitempty"`
	Etag              string          `json:"etag,omitempty"`
	// Cost is what the compute's nodes cost so far, idle time included.
	Cost *Cost `json:"cost,omitempty"`
	// SchedulesCheckedOn is when the controller last applied the
	// compute's schedules: a firing between then and a server start was
	// missed and is applied once.
	SchedulesCheckedOn time.Time `json:"schedules_checked_on,omitzero"`
	// ServerlessJob is set on the hidden compute that holds a serverless
	// job's nodes: the job's name. Such a compute is created with the job,
	// left out of compute lists and deleted when the job ends.
	ServerlessJob string `json:"serverless_job,omitempty"`
}

// ServerlessPrefix starts the name of every serverless job's hidden
// compute; users cannot create computes named so, nor one named
// "serverless", which a job file uses to ask for serverless nodes.
const ServerlessPrefix = "serverless-"

// ComputeExtensions are the compute settings tide adds to Azure ML's
// schema, under the key tide.
type ComputeExtensions struct {
	// ScaleDownPolicy names the autoscale policy: ScaleDownFixed (the
	// default, Azure's idle_time_before_scale_down) or ScaleDownAdaptive.
	ScaleDownPolicy string `json:"scale_down_policy,omitempty"`
	// MaxStartingNodes caps how many nodes start at once (0: no cap), so a
	// burst of jobs does not ask the backend for every node in one go.
	MaxStartingNodes int `json:"max_starting_nodes,omitempty"`
	// Schedules set min_instances and max_instances by cron or
	// recurrence (max_instances 0 pauses the cluster).
	Schedules []StartStopSchedule `json:"schedules,omitempty"`
}

// Scale-down policies of ComputeExtensions.ScaleDownPolicy.
const (
	ScaleDownFixed    = "fixed"
	ScaleDownAdaptive = "adaptive"
)

// ScaleDownPolicy returns the compute's scale-down policy name, "" when it
// sets none.
func (c *Compute) ScaleDownPolicy() string {
	if c.Tide == nil {
		return ""
	}
	return c.Tide.ScaleDownPolicy
}

// SSHSettings configures SSH access to a compute's nodes. Secrets are stored
// by the server but never returned: AdminPassword and SSHKeyValue come back
// empty, with HasAdminPassword and HasSSHKeyValue telling whether they are set.
type SSHSettings struct {
	AdminUsername    string `json:"admin_username,omitempty"`
	AdminPassword    string `json:"admin_password,omitempty"`
	SSHKeyValue      string `json:"ssh_key_value,omitempty"`
	HasAdminPassword bool   `json:"has_admin_password,omitempty"`
	HasSSHKeyValue   bool   `json:"has_ssh_key_value,omitempty"`
	// SSHPort is an attached machine's sshd port (default 22).
	SSHPort int `json:"ssh_port,omitempty"`
	// SSHPrivateKeyFile is the file (on the client) of the private key an
	// attached machine accepts; the CLI sends its contents as
	// SSHPrivateKey.
	SSHPrivateKeyFile string `json:"ssh_private_key_file,omitempty"`
	// SSHPrivateKey is that private key (OpenSSH or PEM, unencrypted). The
	// server keeps it as a workspace secret; HasSSHPrivateKey tells it is
	// set.
	SSHPrivateKey    string `json:"ssh_private_key,omitempty"`
	HasSSHPrivateKey bool   `json:"has_ssh_private_key,omitempty"`
}

// NetworkSettings names the network a compute's nodes join.
type NetworkSettings struct {
	VnetName string `json:"vnet_name,omitempty"`
	Subnet   string `json:"subnet,omitempty"`
}

// Identity is a compute's managed identity, kept for compatibility with
// Azure ML files.
type Identity struct {
	Type                   string             `json:"type"`
	UserAssignedIdentities []IdentityResource `json:"user_assigned_identities,omitempty"`
}

// IdentityResource names one user-assigned identity.
type IdentityResource struct {
	ResourceID string `json:"resource_id"`
}

// NodeStateCounts counts a compute's nodes by state, as Azure ML does.
type NodeStateCounts struct {
	Idle      int `json:"idle"`
	Running   int `json:"running"`
	Preparing int `json:"preparing"`
	Unusable  int `json:"unusable"`
	Leaving   int `json:"leaving"`
	Preempted int `json:"preempted"`
}

// ErrorDetail is one error recorded on a resource.
type ErrorDetail struct {
	Code    string    `json:"code"`
	Message string    `json:"message"`
	Time    time.Time `json:"time,omitzero"`
}

// Redacted returns a copy of c with secrets removed, for responses.
func (c Compute) Redacted() Compute {
	if c.SSHSettings != nil {
		s := *c.SSHSettings
		s.HasAdminPassword = s.HasAdminPassword || s.AdminPassword != ""
		s.HasSSHKeyValue = s.HasSSHKeyValue || s.SSHKeyValue != ""
		s.HasSSHPrivateKey = s.HasSSHPrivateKey || s.SSHPrivateKey != ""
		s.AdminPassword, s.SSHKeyValue, s.SSHPrivateKey = "", "", ""
		c.SSHSettings = &s
	}
	if c.Kubernetes != nil {
		k := *c.Kubernetes
		k.HasKubeconfig = k.HasKubeconfig || k.Kubeconfig != ""
		k.Kubeconfig = ""
		c.Kubernetes = &k
	}
	return c
}

// ComputePatch is the body of PATCH on a compute: the fields that may change
// on a running cluster. Nil fields are left as they are.
type ComputePatch struct {
	Description             *string            `json:"description,omitempty"`
	Tags                    *map[string]string `json:"tags,omitempty"`
	MinInstances            *int               `json:"min_instances,omitempty"`
	MaxInstances            *int               `json:"max_instances,omitempty"`
	IdleTimeBeforeScaleDown *int               `json:"idle_time_before_scale_down,omitempty"`
}

// Size is a VM size from tide's catalog, with Azure's published figures.
type Size struct {
	Name               string  `json:"name"`
	Family             string  `json:"family"`
	VCPUs              int     `json:"vcpus"`
	MemoryGB           float64 `json:"memory_gb"`
	GPUs               int     `json:"gpus"`
	GPUType            string  `json:"gpu_type,omitempty"`
	LowPriorityCapable bool    `json:"low_priority_capable"`
	PricePerHour       float64 `json:"price_per_hour"`
	LowPriorityPrice   float64 `json:"low_priority_price_per_hour,omitempty"`
}

// Usage is the quota use of one VM family and tier in one location: the
// vCPUs that computes reserve (max_instances × vCPUs) against the limit.
type Usage struct {
	Location     string `json:"location"`
	Family       string `json:"family"`
	Tier         string `json:"tier"`
	CurrentValue int    `json:"current_value"`
	Limit        int    `json:"limit"`
	Unit         string `json:"unit"`
}

// Location is a place nodes come from: a provider and its settings.
type Location struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Default  bool   `json:"default,omitempty"`
	Runtime  string `json:"runtime,omitempty"`
}

// Workspace groups resources, so access control can be added later without
// changing the API.
type Workspace struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	CreatedOn   time.Time `json:"created_on,omitzero"`
}

// List is the shape of every list response.
type List[T any] struct {
	Value    []T    `json:"value"`
	NextLink string `json:"next_link,omitempty"`
}

// MaxRequestBody bounds API request bodies (other than snapshot and
// artifact uploads), so also the compute, job and other files the CLI sends.
const MaxRequestBody = 4 << 20

// Problem is an RFC 9457 problem+json error body. Code is stable and meant
// for programs; Field names the offending field for validation errors.
type Problem struct {
	Type   string         `json:"type,omitempty"`
	Title  string         `json:"title"`
	Status int            `json:"status"`
	Code   string         `json:"code"`
	Detail string         `json:"detail,omitempty"`
	Field  string         `json:"field,omitempty"`
	Errors []FieldProblem `json:"errors,omitempty"`
	// Limit, Workspace and RetryAfter explain a 429 Too Many Requests: the
	// server setting that refused the request (limits.submit_rate,
	// limits.max_queued_jobs), the workspace it limits, and the seconds to
	// wait before retrying (the Retry-After header says the same).
	Limit      string `json:"limit,omitempty"`
	Workspace  string `json:"workspace,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// FieldProblem is one validation error inside a Problem.
type FieldProblem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`
}

// Stable problem codes.
const (
	CodeValidation       = "ValidationError"
	CodeNotFound         = "NotFound"
	CodeQuotaExceeded    = "QuotaExceeded"
	CodeConflict         = "Conflict"
	CodeUnauthorized     = "Unauthorized"
	CodePrecondition     = "PreconditionFailed"
	CodeNotSupported     = "NotSupported"
	CodeInternal         = "InternalError"
	CodeBadRequest       = "BadRequest"
	CodeMethodNotAllowed = "MethodNotAllowed"
	CodeTooManyRequests  = "TooManyRequests"
)

// MaxStartingNodes returns the compute's cap on nodes starting at once (0:
// none).
func (c *Compute) MaxStartingNodes() int {
	if c.Tide == nil {
		return 0
	}
	return c.Tide.MaxStartingNodes
}
