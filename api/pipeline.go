package api

import "encoding/json"

// Job types tide runs.
const (
	JobTypeCommand  = "command"
	JobTypePipeline = "pipeline"
)

// PipelineSettings are a pipeline job's `settings:` block.
type PipelineSettings struct {
	// DefaultCompute is the compute of steps that name none.
	DefaultCompute string `json:"default_compute,omitempty"`
	// DefaultDatastore is where step outputs without a path are written
	// (Azure's default path, azureml/JOB/OUTPUT, in that datastore), as
	// well as handed to the next steps.
	DefaultDatastore string `json:"default_datastore,omitempty"`
	// ContinueOnStepFailure keeps running the steps that do not depend on
	// a failed one; the pipeline still ends Failed.
	ContinueOnStepFailure bool `json:"continue_on_step_failure,omitempty"`
	// ForceRerun runs every step even when an earlier run could be reused.
	ForceRerun bool `json:"force_rerun,omitempty"`
}

// PipelineStep is the state of one step of a pipeline job, set by the
// server: the child job that runs it, its status, and the earlier job whose
// outputs it reused, if any.
type PipelineStep struct {
	Name   string `json:"name"`
	Job    string `json:"job,omitempty"`
	Status string `json:"status"`
	// ReusedFrom is the earlier step job whose outputs this step took
	// instead of running.
	ReusedFrom string `json:"reused_from,omitempty"`
}

// Step statuses besides the job statuses.
const (
	// StepWaiting: a step waits for the steps it depends on.
	StepWaiting = "NotStarted"
	// StepSkipped: a step a failed step's failure kept from running.
	StepSkipped = "Skipped"
)

// MarshalJSON writes a binding as its bare string, as the YAML has it.
func (o JobOutput) MarshalJSON() ([]byte, error) {
	if o.Bind != "" {
		return json.Marshal(o.Bind)
	}
	type obj JobOutput
	return json.Marshal(obj(o))
}

// UnmarshalJSON accepts a binding string or an object.
func (o *JobOutput) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*o = JobOutput{}
		return json.Unmarshal(b, &o.Bind)
	}
	type obj JobOutput
	var v obj
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*o = JobOutput(v)
	return nil
}
