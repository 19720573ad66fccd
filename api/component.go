package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Component is an Azure ML command component: a named, versioned command
// with typed inputs and outputs that pipeline steps run. Registered
// versions are immutable, as environments are. A pipeline step names one by
// reference (Ref: "azureml:NAME:VERSION", "azureml:NAME@latest") or carries
// it inline (the CLI reads `component: ./file.yml` into the step).
type Component struct {
	// Ref is a reference to a registered component; the other fields are
	// then empty until the server resolves it.
	Ref string `json:"-"`

	Name        string                    `json:"name,omitempty"`
	Version     string                    `json:"version,omitempty"`
	Type        string                    `json:"type,omitempty"`
	DisplayName string                    `json:"display_name,omitempty"`
	Description string                    `json:"description,omitempty"`
	Tags        map[string]string         `json:"tags,omitempty"`
	Inputs      map[string]ComponentInput `json:"inputs,omitempty"`
	Outputs     map[string]JobOutput      `json:"outputs,omitempty"`
	Code        string                    `json:"code,omitempty"`
	Environment *JobEnvironment           `json:"environment,omitempty"`
	Command     string                    `json:"command,omitempty"`
	// EnvironmentVariables are set in the jobs the component runs as.
	EnvironmentVariables map[string]string `json:"environment_variables,omitempty"`
	Distribution         *Distribution     `json:"distribution,omitempty"`
	Resources            *JobResources     `json:"resources,omitempty"`
	// IsDeterministic (default true) lets a pipeline reuse an earlier run
	// of a step with the same component, code, environment and inputs.
	IsDeterministic *bool `json:"is_deterministic,omitempty"`

	// Set by the server.
	Workspace string    `json:"workspace,omitempty"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	Etag      string    `json:"etag,omitempty"`
}

// ComponentInput declares one input of a component: its type (uri_folder,
// uri_file, integer, number, string, boolean), an optional default (for
// literal types), whether it may be left out, and limits on its value.
type ComponentInput struct {
	Type        string   `json:"type"`
	Default     *string  `json:"default,omitempty"`
	Optional    bool     `json:"optional,omitempty"`
	Description string   `json:"description,omitempty"`
	Enum        []string `json:"enum,omitempty"`
	Min         *float64 `json:"min,omitempty"`
	Max         *float64 `json:"max,omitempty"`
}

// Deterministic reports whether runs of the component may be reused.
func (c *Component) Deterministic() bool { return c.IsDeterministic == nil || *c.IsDeterministic }

// MarshalJSON writes a reference as a string and a component as an object.
func (c Component) MarshalJSON() ([]byte, error) {
	if c.Ref != "" {
		return json.Marshal(c.Ref)
	}
	type obj Component
	return json.Marshal(obj(c))
}

// UnmarshalJSON accepts a string reference or an object.
func (c *Component) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &c.Ref)
	}
	type obj Component
	var v obj
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*c = Component(v)
	return nil
}

// Components lists the components of workspace ws, every version, or the
// versions of name when it is not empty.
func (c *Client) Components(ctx context.Context, ws, name string) ([]Component, error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	return list[Component](ctx, c, v1("workspaces", ws, "components"), q)
}

// Component returns one version of a component; version "latest" is the
// most recently created one.
func (c *Client) Component(ctx context.Context, ws, name, version string) (*Component, error) {
	var out Component
	if _, err := c.do(ctx, http.MethodGet, v1("workspaces", ws, "components", name, "versions", version), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateComponent registers a version of a component (an empty version
// gets the next number) and reports whether it was new: putting an
// existing version again with the same content is not an error.
func (c *Client) CreateComponent(ctx context.Context, ws string, comp *Component) (out *Component, created bool, err error) {
	out = new(Component)
	code, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "components"), nil, comp, out)
	if err != nil {
		return nil, false, err
	}
	return out, code == http.StatusCreated, nil
}

// DeleteComponent deletes one version of a component.
func (c *Client) DeleteComponent(ctx context.Context, ws, name, version string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "components", name, "versions", version), nil, nil, nil)
	return err
}
