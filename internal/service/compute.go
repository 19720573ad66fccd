package service

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// ParseCompute parses a compute document (YAML or JSON) from a request body.
func (s *Service) ParseCompute(body []byte) (*api.Compute, error) {
	c, err := spec.ParseCompute("request body", body, nil)
	if err != nil {
		return nil, validation(err)
	}
	return c, nil
}

// PutCompute creates or updates a compute, as `az ml compute create` does.
// name is the name in the URL; a different name in the body is an error.
// ifMatch, when set, must equal the stored etag. It reports whether the
// compute was created.
func (s *Service) PutCompute(ctx context.Context, ws, name string, c *api.Compute, ifMatch string) (*api.Compute, bool, error) {
	if c.Name == "" {
		c.Name = name
	}
	if c.Name != name {
		e := errorf(400, api.CodeValidation, "name: %q in the body differs from %q in the URL", c.Name, name)
		e.Field = "name"
		return nil, false, e
	}
	if c.IsAttached() {
		c.Location = ""
		if err := spec.ValidateCompute(c, spec.Env{Catalog: s.Catalog}); err != nil {
			return nil, false, validation(err)
		}
		if ifMatch != "" {
			return nil, false, errorf(412, api.CodePrecondition, "an attached compute cannot be changed, so If-Match does not apply; detach it and attach it again")
		}
		attach := s.attach
		if c.IsKubernetes() {
			attach = s.attachKubernetes
		}
		out, err := attach(ctx, ws, c)
		return out, err == nil, err
	}
	if c.Location == "" {
		c.Location = s.Config.DefaultLocation()
	}
	if err := spec.ValidateCompute(c, spec.Env{Catalog: s.Catalog, Locations: s.Config.LocationNames()}); err != nil {
		return nil, false, validation(err)
	}
	warning, err := s.hostFit(c)
	if err != nil {
		return nil, false, err
	}
	created := false
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		created = false
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		old, err := tx.GetCompute(ctx, ws, c.Name)
		switch {
		case store.IsNotFound(err):
			if ifMatch != "" {
				return errorf(412, api.CodePrecondition, "compute %q does not exist but If-Match was given", c.Name)
			}
			created = true
		case err != nil:
			return err
		default:
			if ifMatch != "" && ifMatch != old.Etag {
				return errorf(412, api.CodePrecondition, "compute %q changed since etag %s (now %s); read it again and retry", c.Name, ifMatch, old.Etag)
			}
			if old.ProvisioningState == api.ProvisioningDeleting {
				return errorf(409, api.CodeConflict, "compute %q is being deleted; wait until it is gone, then create it again", c.Name)
			}
			if old.IsAttached() {
				return errorf(409, api.CodeConflict, "compute %q is an attached machine; detach it ('tide compute detach %s') before creating a %s of that name", c.Name, c.Name, c.Type)
			}
			if err := spec.CheckComputeUpdate(old, c); err != nil {
				return validation(err)
			}
			keepSecrets(old, c)
		}
		if err := spec.CheckComputeCredentials(c); err != nil {
			return validation(err)
		}
		if err := checkComputeIdentities(ctx, tx, c); err != nil {
			return err
		}
		if err := s.checkQuota(ctx, tx, ws, c); err != nil {
			return err
		}
		now := s.now()
		c.Workspace = ws
		if c.IsInstance() {
			var prev *api.Compute
			if !created {
				prev = old
			}
			if err := prepareInstance(c, prev); err != nil {
				return err
			}
			if created {
				c.Instance.LastOperation.OperationTime = now
			}
		}
		c.ID = "/workspaces/" + ws + "/computes/" + c.Name
		c.Errors = nil
		if created {
			c.CreatedOn, c.ModifiedOn = now, now
			c.ProvisioningState = api.ProvisioningCreating
			c.AllocationState = api.AllocationSteady
			c.CurrentNodeCount, c.TargetNodeCount, c.NodeStateCounts = 0, 0, api.NodeStateCounts{}
		} else {
			c.CreatedOn, c.ModifiedOn = old.CreatedOn, now
			c.ProvisioningState = api.ProvisioningUpdating
			c.AllocationState = old.AllocationState
			c.CurrentNodeCount, c.TargetNodeCount, c.NodeStateCounts = old.CurrentNodeCount, old.TargetNodeCount, old.NodeStateCounts
		}
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		kind, msg := "Updated", "compute updated"
		switch {
		case created && c.IsInstance():
			kind, msg = "Created", fmt.Sprintf("compute instance created: %s, location %s", c.Size, c.Location)
		case created:
			kind, msg = "Created", fmt.Sprintf("compute created: %s, %d-%d nodes, idle %ds, location %s", c.Size, c.MinInstances, c.MaxInstances, c.IdleTimeBeforeScaleDown, c.Location)
		}
		if warning != "" {
			if err := tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: "Oversubscribed", Message: warning}); err != nil {
				return err
			}
		}
		return tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: kind, Message: msg})
	})
	if warning != "" && s.Log != nil {
		s.Log.WarnContext(ctx, "compute oversubscribes its host", "compute", c.Name, "detail", warning)
	}
	if err != nil {
		return nil, false, s.mapStoreErr(err, "compute", c.Name)
	}
	s.notify()
	r := c.Redacted()
	r.Runtime = s.Config.Runtime(r.Location)
	return &r, created, nil
}

// keepSecrets carries stored secrets into an update that does not repeat
// them: responses never return secrets, so a client that round-trips a
// compute must not erase them.
func keepSecrets(old, c *api.Compute) {
	if old.SSHSettings == nil || c.SSHSettings == nil {
		return
	}
	if c.SSHSettings.AdminPassword == "" {
		c.SSHSettings.AdminPassword = old.SSHSettings.AdminPassword
	}
	if c.SSHSettings.SSHKeyValue == "" {
		c.SSHSettings.SSHKeyValue = old.SSHSettings.SSHKeyValue
	}
}

func (s *Service) checkQuota(ctx context.Context, tx store.Tx, ws string, c *api.Compute) error {
	all, err := tx.ListComputes(ctx, "")
	if err != nil {
		return err
	}
	c.Workspace = ws
	if err := catalog.Check(all, *c, s.Catalog, s.Config.Quotas); err != nil {
		var qe *catalog.QuotaError
		if errors.As(err, &qe) {
			return errorf(409, api.CodeQuotaExceeded, "%s", qe.Error())
		}
		return err
	}
	return nil
}

// PatchCompute changes the fields that may change on a live cluster.
func (s *Service) PatchCompute(ctx context.Context, ws, name string, p *api.ComputePatch, ifMatch string) (*api.Compute, error) {
	var out *api.Compute
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		c, err := s.compute(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if ifMatch != "" && ifMatch != c.Etag {
			return errorf(412, api.CodePrecondition, "compute %q changed since etag %s (now %s); read it again and retry", name, ifMatch, c.Etag)
		}
		if err := serverlessOwned(c, "changed"); err != nil {
			return err
		}
		if p.Description != nil {
			c.Description = *p.Description
		}
		if p.Tags != nil {
			c.Tags = *p.Tags
		}
		if p.MinInstances != nil {
			c.MinInstances = *p.MinInstances
		}
		if p.MaxInstances != nil {
			c.MaxInstances = *p.MaxInstances
		}
		if p.IdleTimeBeforeScaleDown != nil {
			c.IdleTimeBeforeScaleDown = *p.IdleTimeBeforeScaleDown
		}
		if err := spec.ValidateCompute(c, spec.Env{Catalog: s.Catalog, Locations: s.Config.LocationNames()}); err != nil {
			return validation(err)
		}
		if err := s.checkQuota(ctx, tx, ws, c); err != nil {
			return err
		}
		c.ModifiedOn = s.now()
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		out = c
		return tx.AddEvent(ctx, ws, "compute/"+name, &api.Event{Time: c.ModifiedOn, Kind: "Updated",
			Message: fmt.Sprintf("scale settings now %d-%d nodes, idle %ds", c.MinInstances, c.MaxInstances, c.IdleTimeBeforeScaleDown)})
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "compute", name)
	}
	s.notify()
	r := out.Redacted()
	r.Runtime = s.Config.Runtime(r.Location)
	return &r, nil
}

func (s *Service) compute(ctx context.Context, tx store.Tx, ws, name string) (*api.Compute, error) {
	if _, err := s.workspace(ctx, tx, ws); err != nil {
		return nil, err
	}
	c, err := tx.GetCompute(ctx, ws, name)
	if store.IsNotFound(err) {
		return nil, notFound("compute", name, "run 'tide compute list' to see the computes of workspace "+ws)
	}
	return c, err
}

// Compute returns one compute, without secrets.
func (s *Service) Compute(ctx context.Context, ws, name string) (*api.Compute, error) {
	var out *api.Compute
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if out, err = s.compute(ctx, tx, ws, name); err == nil {
			s.describeInstance(ctx, tx, out)
			out.Cost = s.computeCost(ctx, tx, out)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	r := out.Redacted()
	r.Runtime = s.Config.Runtime(r.Location)
	return &r, nil
}

// Computes lists a workspace's computes, without secrets.
func (s *Service) Computes(ctx context.Context, ws string) ([]api.Compute, error) {
	var out []api.Compute
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		all, err := tx.ListComputes(ctx, ws)
		if err != nil {
			return err
		}
		// Serverless jobs' computes are theirs, shown by the jobs.
		for _, c := range all {
			if c.ServerlessJob == "" {
				out = append(out, c)
			}
		}
		for i := range out {
			s.describeInstance(ctx, tx, &out[i])
		}
		return nil
	})
	for i := range out {
		out[i] = out[i].Redacted()
		out[i].Runtime = s.Config.Runtime(out[i].Location)
	}
	if out == nil {
		out = []api.Compute{}
	}
	return out, err
}

// DeleteCompute marks a compute Deleting; the controller drains its nodes,
// cancels its unfinished jobs and removes it. Its quota is released at once.
// An attached compute is detached instead (o.Detach), the same way.
func (s *Service) DeleteCompute(ctx context.Context, ws, name, ifMatch string, o DeleteOptions) error {
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		c, err := s.compute(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if err := checkEtag("compute", name, c.Etag, ifMatch); err != nil {
			return err
		}
		if err := serverlessOwned(c, "deleted"); err != nil {
			return err
		}
		if c.ProvisioningState == api.ProvisioningDeleting {
			return nil
		}
		if err := checkDelete(ctx, tx, c, o); err != nil {
			return err
		}
		c.ProvisioningState = api.ProvisioningDeleting
		c.ModifiedOn = s.now()
		if err := tx.PutCompute(ctx, c, ""); err != nil {
			return err
		}
		msg := "compute deletion requested"
		if o.Detach {
			msg = "detach requested: the node stops and tide's files leave the machine"
		}
		return tx.AddEvent(ctx, ws, "compute/"+name, &api.Event{Time: c.ModifiedOn, Kind: "Deleting", Message: msg})
	})
	if err != nil {
		return s.mapStoreErr(err, "compute", name)
	}
	s.notify()
	return nil
}

// Nodes lists a compute's nodes, with the last heartbeat this replica
// answered where the store's is older (beatmemo.go).
func (s *Service) Nodes(ctx context.Context, ws, name string) ([]api.Node, error) {
	var out []api.Node
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		c, err := s.compute(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if out, err = tx.ListNodes(ctx, ws, name); err == nil {
			nodeConnection(ws, c, out)
		}
		return err
	})
	s.beats.memo.overlay(out)
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedOn.Before(out[j].CreatedOn) })
	if out == nil {
		out = []api.Node{}
	}
	return out, err
}

// Events lists a resource's events ("compute/NAME" or "job/NAME").
func (s *Service) Events(ctx context.Context, ws, kind, name string) ([]api.Event, error) {
	var out []api.Event
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		switch kind {
		case "compute":
			_, err = s.compute(ctx, tx, ws, name)
		default:
			_, err = s.job(ctx, tx, ws, name)
		}
		if err != nil {
			return err
		}
		out, err = tx.ListEvents(ctx, ws, kind+"/"+name, 0, 1000)
		return err
	})
	if out == nil {
		out = []api.Event{}
	}
	return out, err
}

// checkEtag fails with 412 when the client's If-Match names another
// version than the stored one.
func checkEtag(kind, name, stored, ifMatch string) error {
	if ifMatch == "" || ifMatch == "*" || ifMatch == stored {
		return nil
	}
	return errorf(412, api.CodePrecondition, "%s %q changed since you read it (If-Match %s, now %s); read it again and retry", kind, name, ifMatch, stored)
}

func (s *Service) mapStoreErr(err error, kind, name string) error {
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, store.ErrPrecondition) {
		return errorf(412, api.CodePrecondition, "%s %q changed concurrently; read it again and retry", kind, name)
	}
	return err
}
