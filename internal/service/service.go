// Package service holds the rules a request must pass before it changes
// tide's state: validation, quota, what may change after creation, and what a
// job needs before it may queue. HTTP handlers translate requests into these
// calls and errors into problem responses; the controller acts on what they
// store. Every change is one store transaction.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// Error is a failure a client caused or must know about, with a stable
// problem code and HTTP status.
type Error struct {
	Status int
	Code   string
	Msg    string
	Field  string
	Fields []api.FieldProblem
	// Workspace, Limit and RetryAfter describe a refusal by an admission
	// limit (429): the workspace, the config setting and when to retry.
	Workspace, Limit string
	RetryAfter       time.Duration
	// parts are the problems an error of several problems gathers.
	parts problems
}

func (e *Error) Error() string { return e.Msg }

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// notFound names the resource and what to do.
func notFound(kind, name, hint string) *Error {
	return errorf(404, api.CodeNotFound, "%s %q not found; %s", kind, name, hint)
}

// validation turns a spec error into a 400 with the field paths.
func validation(err error) error {
	var fe *spec.FieldError
	var fes spec.Errors
	e := &Error{Status: 400, Code: api.CodeValidation, Msg: err.Error()}
	switch {
	case errors.As(err, &fes):
		for _, f := range fes {
			e.Fields = append(e.Fields, api.FieldProblem{Field: f.Field, Message: f.Message, Line: f.Line})
		}
	case errors.As(err, &fe):
		e.Fields = []api.FieldProblem{{Field: fe.Field, Message: fe.Message, Line: fe.Line}}
	}
	if len(e.Fields) > 0 {
		e.Field = e.Fields[0].Field
	}
	return e
}

// Service implements operations on workspaces, computes and jobs.
type Service struct {
	Store   store.Store
	Catalog *catalog.Catalog
	Config  config.Server
	Log     *slog.Logger
	// Notify is called after a change the controller must act on.
	Notify func()
	// Placer places a command job in its submission's transaction when
	// the scheduler would place it at once; nil leaves every job to the
	// controller's next turn.
	Placer Placer
	// Now is the clock; tests inject one.
	Now func() time.Time
	// Blobs tells whether code and data snapshots were uploaded.
	Blobs Blobs
	// SecretBox encrypts workspace secrets at rest; nil keeps them in
	// clear (tests of the service alone; the server always sets it).
	SecretBox *SecretBox
	// IdentityToken mints the token a job attempt acts with; nil gives
	// jobs none.
	IdentityToken func(j *api.Job, c *api.Compute) string
	// Outputs hands step outputs between the steps of pipeline jobs; nil
	// refuses pipelines.
	Outputs StepOutputs
	// Artifacts keeps the empty artifacts agents report with a final
	// status; nil refuses such reports.
	Artifacts EmptyArtifacts
	// HostGPUs counts the NVIDIA GPUs of the server's host, for jobs on
	// docker-runtime locations whose nodes run there; nil skips the check.
	HostGPUs func() int
	// HostCapacity is the capacity of the one host a location's nodes all
	// run on (a local location), or false when its nodes have hosts of
	// their own; nil skips the check.
	HostCapacity func(location string) (api.Size, bool)
	// DockerEngine checks that a Docker engine answers, for jobs with an
	// image on docker-runtime locations; nil skips the check.
	DockerEngine func(ctx context.Context) error
	// ProbeMachine logs in to a machine being attached; nil refuses
	// attaching.
	ProbeMachine MachineProbe
	// ProbeKubernetes reaches a Kubernetes cluster being attached; nil
	// refuses such attachments.
	ProbeKubernetes KubernetesProbe

	beats   heartbeats  // waiting for their transaction (heartbeat.go)
	submits submissions // waiting for their transaction (submit.go)
}

// Placer places a job as it is submitted (controller.Controller).
type Placer interface {
	// PlaceSubmitted places j, just written Queued in tx, in tx if it is
	// to run at once, updates j to what it wrote, and returns what to do
	// once tx has committed (nil: nothing was placed).
	PlaceSubmitted(ctx context.Context, tx store.Tx, j *api.Job) (func(), error)
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) notify() {
	if s.Notify != nil {
		s.Notify()
	}
}

// Bootstrap makes sure the default workspace exists.
func (s *Service) Bootstrap(ctx context.Context) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetWorkspace(ctx, api.DefaultWorkspace); err == nil {
			return nil
		} else if !store.IsNotFound(err) {
			return err
		}
		return tx.PutWorkspace(ctx, &api.Workspace{Name: api.DefaultWorkspace, Description: "created by tide", CreatedOn: s.now()})
	})
}

// Workspaces lists workspaces.
func (s *Service) Workspaces(ctx context.Context) ([]api.Workspace, error) {
	var out []api.Workspace
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		out, err = tx.ListWorkspaces(ctx)
		return err
	})
	return out, err
}

// Workspace returns one workspace.
func (s *Service) Workspace(ctx context.Context, name string) (*api.Workspace, error) {
	var out *api.Workspace
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		out, err = s.workspace(ctx, tx, name)
		return err
	})
	return out, err
}

func (s *Service) workspace(ctx context.Context, tx store.Tx, name string) (*api.Workspace, error) {
	w, err := tx.GetWorkspace(ctx, name)
	if store.IsNotFound(err) {
		return nil, notFound("workspace", name, "run 'tide workspace list' to see the workspaces, or 'tide workspace create "+name+"'")
	}
	return w, err
}

// PutWorkspace creates a workspace (idempotent).
func (s *Service) PutWorkspace(ctx context.Context, w api.Workspace) (*api.Workspace, bool, error) {
	if !workspaceName.MatchString(w.Name) {
		e := errorf(400, api.CodeValidation, "name: workspace names are 3-33 letters, digits, '-' or '_', starting with a letter or digit (got %q)", w.Name)
		e.Field = "name"
		return nil, false, e
	}
	created := false
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		old, err := tx.GetWorkspace(ctx, w.Name)
		switch {
		case err == nil:
			w.CreatedOn = old.CreatedOn
		case store.IsNotFound(err):
			created = true
			w.CreatedOn = s.now()
		default:
			return err
		}
		return tx.PutWorkspace(ctx, &w)
	})
	return &w, created, err
}

var workspaceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{2,32}$`)

// Locations lists the configured locations.
func (s *Service) Locations() []api.Location {
	var out []api.Location
	def := s.Config.DefaultLocation()
	for _, l := range s.Config.Locations {
		out = append(out, api.Location{Name: l.Name, Provider: l.Provider, Runtime: l.Runtime, Default: l.Name == def})
	}
	return out
}

// Usages reports quota use per location, family and tier.
func (s *Service) Usages(ctx context.Context, location string) ([]api.Usage, error) {
	var computes []api.Compute
	if err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		computes, err = tx.ListComputes(ctx, "")
		return err
	}); err != nil {
		return nil, err
	}
	locs := s.Config.LocationNames()
	if location != "" {
		if !contains(locs, location) {
			return nil, s.unknownLocation(location)
		}
		// A location's usage comes from its own computes only; passing just
		// those keeps catalog.Usage from adding the locations of the others.
		locs = []string{location}
		computes = slices.DeleteFunc(computes, func(c api.Compute) bool { return c.Location != location })
	}
	return catalog.Usage(computes, s.Catalog, s.Config.Quotas, locs), nil
}

func (s *Service) unknownLocation(name string) error {
	e := errorf(400, api.CodeValidation, "location %q: unknown location; known locations: %s", name, strings.Join(s.Config.LocationNames(), ", "))
	e.Field = "location"
	return e
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// newJobName generates an Azure-like job name.
func newJobName() string {
	return spec.NewJobName(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
}
