package service

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
)

// Assignments: what a node is told to run (AssignmentFor), its id, and
// the rendezvous port of a distributed attempt.

// AssignmentID names one attempt of a job: "<workspace>/<job>/<attempt>".
func AssignmentID(ws, job string, attempt int) string {
	return ws + "/" + job + "/" + strconv.Itoa(attempt)
}

// ParseAssignmentID splits an assignment id.
func ParseAssignmentID(id string) (ws, job string, attempt int, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		return "", "", 0, errorf(400, api.CodeBadRequest, "assignment id %q: want WORKSPACE/JOB/ATTEMPT", id)
	}
	attempt, err = strconv.Atoi(parts[2])
	if err != nil {
		return "", "", 0, errorf(400, api.CodeBadRequest, "assignment id %q: attempt is not a number", id)
	}
	return parts[0], parts[1], attempt, nil
}

// AssignmentFor builds what node rank `rank` of a job runs. The controller
// pushes it; the stream handler re-sends it to an agent that reconnects
// before it started the job.
func AssignmentFor(j *api.Job, rank int, addresses []string, runtime string, grace int) api.Assignment {
	a := api.Assignment{
		ID:             AssignmentID(j.Workspace, j.Name, j.Attempt),
		Workspace:      j.Workspace,
		Job:            j.Name,
		Attempt:        j.Attempt,
		NodeRank:       rank,
		NodeCount:      len(j.Ranks),
		Nodes:          addresses,
		Command:        j.Command,
		Env:            j.EnvironmentVariables,
		ExperimentName: j.ExperimentName,
		GraceSeconds:   grace,
	}
	if j.Limits != nil {
		a.TimeoutSeconds = j.Limits.Timeout
	}
	for name, in := range j.Inputs {
		if in.Type == api.InputLiteral || in.Type == "" {
			if a.Inputs == nil {
				a.Inputs = map[string]string{}
			}
			a.Inputs[name] = in.Value
		}
	}
	for name := range j.Outputs {
		a.Outputs = append(a.Outputs, name)
	}
	addData(&a, j)
	if j.Resources != nil {
		a.ShmSize = j.Resources.ShmSize
	}
	a.Environment = j.ResolvedEnvironment
	if runtime == "docker" {
		// The image of the job's inline environment, else of the
		// registered one it names.
		e := j.Environment
		if r := j.ResolvedEnvironment; r != nil && (e == nil || e.Image == "" && e.Build == nil) {
			e = &api.JobEnvironment{Image: r.Image, Build: r.Build}
		}
		if e != nil {
			a.Image = e.Image
			if e.Build != nil {
				a.BuildPath = e.Build.Path
			}
		}
	}
	a.Notes = append(a.Notes, environmentNotes(j, runtime)...)
	if j.Distribution != nil {
		d := *j.Distribution
		a.Distribution = &d
		a.MasterPort = MasterPort(a.ID)
	}
	return a
}

// environmentNotes tell the job's log what of its environment the node's
// runtime does not honour. They are notes, not errors: the host may well
// provide what the image or conda file would (a registered environment's
// tide block says how).
func environmentNotes(j *api.Job, runtime string) []string {
	if runtime == "docker" {
		return nil
	}
	// An inline environment's fields are named as the job file names them.
	image, conda, imageOf, condaOf := "", "", "environment.image", "environment.conda_file"
	if e := j.ResolvedEnvironment; e != nil {
		image, conda = e.Image, e.CondaFile
		imageOf = "the image of environment " + e.Name + ":" + e.Version
		condaOf = "the conda_file of environment " + e.Name + ":" + e.Version
	} else if e := j.Environment; e != nil {
		image, conda = e.Image, e.CondaFile
	}
	var notes []string
	if e := j.Environment; e != nil && e.Build != nil {
		notes = append(notes, fmt.Sprintf("tide: environment.build %q is not used: this node's runtime is %q, which runs the command on the host (configure a location with runtime docker to build images)", e.Build.Path, runtime))
	} else if e := j.ResolvedEnvironment; e != nil && e.Build != nil {
		notes = append(notes, fmt.Sprintf("tide: the build of environment %s:%s is not used: this node's runtime is %q, which runs the command on the host (configure a location with runtime docker to build images)", e.Name, e.Version, runtime))
	}
	if image != "" {
		what := fmt.Sprintf("%s %q", imageOf, image)
		if j.ResolvedEnvironment != nil {
			what = fmt.Sprintf("%s (%q)", imageOf, image)
		}
		notes = append(notes, fmt.Sprintf("tide: %s is not used: this node's runtime is %q, which runs the command on the host (configure a location with runtime docker to run images)", what, runtime))
	}
	if conda != "" {
		notes = append(notes, fmt.Sprintf("tide: %s is not installed by the %q runtime; the host must already provide its packages", condaOf, runtime))
	}
	return notes
}

// MasterPort is the rendezvous port of a distributed job attempt: a port in
// 29500-32499 (29500 is PyTorch's default) derived from the assignment id,
// so every node computes the same one without another round trip, and two
// jobs on one host rarely meet on the same port. The range stays below
// Linux's ephemeral ports (32768 and up by default): an outgoing connection
// on node 0 could otherwise take the port between tide's check and the
// launcher's bind, which failed a DDP job under load.
func MasterPort(assignmentID string) int {
	h := fnv.New32a()
	h.Write([]byte(assignmentID))
	return masterPortBase + int(h.Sum32()%masterPortCount)
}

const (
	masterPortBase  = 29500
	masterPortCount = 3000
)
