package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Environment is a registered environment, as in Azure ML: a named,
// versioned description of what a job's processes run with. Versions are
// immutable; "latest" is the most recently created version of a name.
//
// Image and CondaFile are Azure's. A node whose runtime cannot honour them
// (the process runtime runs commands on the host) says so in the job's log
// and uses the Tide block instead, which tells it how the host provides the
// environment.
type Environment struct {
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Image       string            `json:"image,omitempty"`
	// Build is a Docker build context (the CLI uploads the folder and
	// sends its snapshot reference) that the docker runtime builds the
	// image from, instead of Image.
	Build *BuildContext `json:"build,omitempty"`
	// CondaFile is the content of the conda specification (the CLI reads
	// the file the YAML names).
	CondaFile string `json:"conda_file,omitempty"`
	// Tide is tide's extension: how the process runtime provides the
	// environment on a host.
	Tide *EnvironmentHost `json:"tide,omitempty"`

	// Set by the server.
	Workspace string    `json:"workspace,omitempty"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	Etag      string    `json:"etag,omitempty"`
}

// EnvironmentHost is how a host provides an environment to the process
// runtime: which interpreter runs `python`, what comes first on PATH, and
// extra variables. The job's environment_variables override Variables.
type EnvironmentHost struct {
	// Python is the absolute path of the interpreter; its folder comes
	// first on PATH and `python` and `python3` run it.
	Python string `json:"python,omitempty" yaml:"python"`
	// Path are absolute folders put at the head of PATH, after Python's.
	Path []string `json:"path,omitempty" yaml:"path"`
	// Variables are set in the job's environment.
	Variables map[string]string `json:"variables,omitempty" yaml:"variables"`
}

// Ref returns the reference a job uses for e: azureml:NAME:VERSION.
func (e *Environment) Ref() string { return "azureml:" + e.Name + ":" + e.Version }

// Environments lists the environments of workspace ws, every version, or
// the versions of name when it is not empty.
func (c *Client) Environments(ctx context.Context, ws, name string) ([]Environment, error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	return list[Environment](ctx, c, v1("workspaces", ws, "environments"), q)
}

// Environment returns one version of an environment; version "latest" is
// the most recently created one.
func (c *Client) Environment(ctx context.Context, ws, name, version string) (*Environment, error) {
	var out Environment
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "environments", name, "versions", version), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateEnvironment registers a version of an environment (an empty
// version gets the next number) and reports whether it was new: putting
// an existing version again with the same content is not an error.
func (c *Client) CreateEnvironment(ctx context.Context, ws string, e *Environment) (out *Environment, created bool, err error) {
	out = new(Environment)
	code, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "environments"), nil, e, out)
	if err != nil {
		return nil, false, err
	}
	return out, code == http.StatusCreated, nil
}

// DeleteEnvironment deletes one version of an environment.
func (c *Client) DeleteEnvironment(ctx context.Context, ws, name, version string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "environments", name, "versions", version), nil, nil, nil)
	return err
}
