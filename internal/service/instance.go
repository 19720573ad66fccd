package service

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// InstanceNodeID is the id of a compute instance's node: the same at every
// start, so the provider finds the disk it kept at the last stop.
func InstanceNodeID(ws, name string) string {
	return name + "." + ws
}

// prepareInstance sets a new instance's status, or carries an updated
// one's status over from old (nil on create).
func prepareInstance(c, old *api.Compute) error {
	in := c.Instance
	if ss := in.SetupScripts; ss != nil {
		for field, sc := range map[string]*api.SetupScript{"setup_scripts.creation_script": ss.CreationScript, "setup_scripts.startup_script": ss.StartupScript} {
			if sc != nil && sc.Path != "" && sc.Content == "" {
				e := errorf(400, api.CodeValidation, "%s.path: the server cannot read %q from your machine; create the instance with the tide CLI (it sends the file), or use command", field, sc.Path)
				e.Field = field + ".path"
				return e
			}
		}
	}
	if old == nil || old.Instance == nil {
		in.State, in.Desired = api.InstanceCreating, api.InstanceRunning
		in.LastOperation = &api.LastOperation{OperationName: api.OperationCreate, OperationStatus: api.OperationInProgress, OperationTrigger: api.TriggerUser}
		in.Node = InstanceNodeID(c.Workspace, c.Name)
		in.Setup, in.Applications, in.Connection, in.Activity = nil, nil, nil, nil
		return nil
	}
	o := old.Instance
	in.State, in.Desired, in.LastOperation, in.Node, in.Setup, in.Applications, in.Connection =
		o.State, o.Desired, o.LastOperation, o.Node, o.Setup, o.Applications, o.Connection
	in.Activity = nil
	// SchedulesCheckedOn starts again (zero): firings before an update
	// are not applied late.
	return nil
}

// InstanceOperation starts, stops or restarts a compute instance (op is
// api.OperationStart, OperationStop or OperationRestart), as the user
// asked; the controller does it.
func (s *Service) InstanceOperation(ctx context.Context, ws, name, op string) (*api.Compute, error) {
	var out *api.Compute
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		c, err := s.compute(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if !c.IsInstance() {
			return errorf(400, api.CodeBadRequest, "compute %q is a cluster (type %s); start, stop and restart apply to compute instances (change a cluster's size with min_instances/max_instances)", name, c.Type)
		}
		if c.ProvisioningState == api.ProvisioningDeleting {
			return errorf(409, api.CodeConflict, "compute instance %q is being deleted", name)
		}
		in := c.Instance
		desired := in.Desired
		switch op {
		case api.OperationStart:
			if desired == api.InstanceRunning {
				return errorf(409, api.CodeConflict, "compute instance %q is already %s; stop it first with tide compute stop %s", name, in.State, name)
			}
			desired = api.InstanceRunning
		case api.OperationStop:
			if desired == api.InstanceStopped {
				return errorf(409, api.CodeConflict, "compute instance %q is already %s", name, in.State)
			}
			desired = api.InstanceStopped
		case api.OperationRestart:
			if desired != api.InstanceRunning {
				return errorf(409, api.CodeConflict, "compute instance %q is %s; start it with tide compute start %s", name, in.State, name)
			}
		default:
			return errorf(400, api.CodeBadRequest, "unknown operation %q; use start, stop or restart", op)
		}
		now := s.now()
		in.Desired = desired
		in.LastOperation = &api.LastOperation{OperationName: op, OperationTime: now, OperationStatus: api.OperationInProgress, OperationTrigger: api.TriggerUser}
		c.ModifiedOn = now
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		out = c
		return tx.AddEvent(ctx, ws, "compute/"+name, &api.Event{Time: now, Kind: op, Message: strings.ToLower(op) + " requested by the user"})
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "compute", name)
	}
	s.notify()
	r := out.Redacted()
	return &r, nil
}

// ReportSetup records a setup script's run on the instance the node
// belongs to.
func (s *Service) ReportSetup(ctx context.Context, nodeID string, rep api.SetupReport) error {
	if rep.Script != "creation_script" && rep.Script != "startup_script" {
		return errorf(400, api.CodeBadRequest, "script: must be creation_script or startup_script, got %q", rep.Script)
	}
	const maxLog = 64 << 10
	if len(rep.Log) > maxLog {
		rep.Log = "[... earlier output cut ...]\n" + rep.Log[len(rep.Log)-maxLog:]
	}
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, nodeID)
		if err != nil {
			return err
		}
		c, err := tx.GetCompute(ctx, n.Workspace, n.Compute)
		if err != nil {
			return err
		}
		if !c.IsInstance() {
			return errorf(400, api.CodeBadRequest, "node %s is not a compute instance's node", nodeID)
		}
		now := s.now()
		run := api.SetupRun{Script: rep.Script, Status: rep.Status, ExitCode: rep.ExitCode, Error: rep.Error, Log: rep.Log, Time: now}
		in := c.Instance
		in.Setup = slices.DeleteFunc(in.Setup, func(r api.SetupRun) bool { return r.Script == rep.Script })
		in.Setup = append(in.Setup, run)
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		msg := fmt.Sprintf("%s %s", rep.Script, strings.ToLower(rep.Status))
		if rep.Error != "" {
			msg += ": " + rep.Error
		}
		return tx.AddEvent(ctx, n.Workspace, "compute/"+n.Compute, &api.Event{Time: now, Kind: "Setup", Message: msg})
	})
	if store.IsNotFound(err) {
		return notFound("node", nodeID, "the node was deleted; stop this agent")
	}
	if err != nil {
		return err
	}
	s.notify()
	return nil
}

// instanceSetup is what an instance's agent runs at start: the scripts
// not yet run on its disk (the agent keeps a marker of the creation
// script), and where Jupyter is served.
func instanceSetup(c *api.Compute) *api.InstanceSetup {
	in := c.Instance
	su := &api.InstanceSetup{JupyterBaseURL: JupyterPath(c.Workspace, c.Name)}
	if ss := in.SetupScripts; ss != nil {
		su.CreationScript, su.StartupScript = ss.CreationScript, ss.StartupScript
	}
	return su
}

// JupyterPath is where the server proxies an instance's Jupyter.
func JupyterPath(ws, name string) string {
	return "/v1/workspaces/" + ws + "/instances/" + name + "/jupyter/"
}

// describeInstance fills what a response shows of an instance beyond its
// stored status: its applications, connection and latest activity.
func (s *Service) describeInstance(ctx context.Context, tx store.Tx, c *api.Compute) {
	in := c.Instance
	if in == nil {
		return
	}
	n, err := tx.GetNode(ctx, in.Node)
	if err != nil {
		n = nil
	}
	in.Connection = &api.InstanceConnection{Node: in.Node}
	running := n != nil && (in.State == api.InstanceRunning || in.State == api.InstanceJobRunning)
	if n != nil {
		in.Connection.Address = n.Address
		in.Activity = n.Activity
	}
	if !running {
		in.Connection.SSH = fmt.Sprintf("instance is %s; start it with tide compute start %s", in.State, c.Name)
	}
	jup := api.Application{DisplayName: "Jupyter"}
	switch {
	case !running:
		jup.Reason = fmt.Sprintf("instance is %s", in.State)
	case n.Activity == nil || n.Activity.Jupyter == nil:
		jup.Reason = "the node's agent has not reported Jupyter yet"
	case n.Activity.Jupyter.Port == 0:
		jup.Reason = n.Activity.Jupyter.Reason
	default:
		jup.Available = true
		jup.EndpointURI = strings.TrimRight(s.Config.AdvertiseURL, "/") + JupyterPath(c.Workspace, c.Name)
	}
	in.Applications = []api.Application{jup}
	if running {
		in.Connection.SSH = "tide compute connect-ssh " + c.Name
		if why := sshDenied(c); why != "" {
			in.Connection.SSH = "no SSH: " + why
		}
	}
}

// JupyterTarget is where an instance's Jupyter server listens.
type JupyterTarget struct {
	Address string // host:port
	Token   string
}

// Jupyter returns where the running instance's Jupyter server listens, or
// an error that says why it cannot be reached.
func (s *Service) Jupyter(ctx context.Context, ws, name string) (*JupyterTarget, error) {
	var out *JupyterTarget
	err := s.Store.View(ctx, func(tx store.Tx) error {
		c, err := s.compute(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if !c.IsInstance() {
			return errorf(404, api.CodeNotFound, "compute %q is a cluster; Jupyter runs on compute instances", name)
		}
		in := c.Instance
		if in.State != api.InstanceRunning && in.State != api.InstanceJobRunning {
			return errorf(409, api.CodeConflict, "instance is %s; start it with tide compute start %s", in.State, name)
		}
		n, err := tx.GetNode(ctx, in.Node)
		if err != nil {
			return errorf(409, api.CodeConflict, "instance %q has no node yet; wait until it is Running", name)
		}
		if n.Activity == nil || n.Activity.Jupyter == nil {
			return errorf(503, "Unavailable", "the agent of instance %q has not reported Jupyter yet; retry in a few seconds", name)
		}
		if j := n.Activity.Jupyter; j.Port == 0 {
			return errorf(503, "Unavailable", "Jupyter is not available on instance %q: %s", name, j.Reason)
		}
		host := n.Address
		if host == "" {
			host = "127.0.0.1"
		}
		out = &JupyterTarget{Address: fmt.Sprintf("%s:%d", host, n.Activity.Jupyter.Port), Token: n.Activity.Jupyter.Token}
		return nil
	})
	return out, err
}
