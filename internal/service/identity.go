package service

import (
	"context"
	"fmt"
	"path"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// IdentityName is the tide identity an Azure resource id names: its last
// path segment (".../userAssignedIdentities/NAME" or just "NAME").
func IdentityName(resourceID string) string { return path.Base(resourceID) }

// computeIdentities are the principals a compute's `identity` gives its
// jobs, the system-assigned one first.
func computeIdentities(c *api.Compute) []string {
	if c == nil || c.Identity == nil {
		return nil
	}
	switch c.Identity.Type {
	case "system_assigned":
		return []string{"compute:" + c.Workspace + "/" + c.Name}
	case "user_assigned":
		var out []string
		for _, r := range c.Identity.UserAssignedIdentities {
			out = append(out, IdentityName(r.ResourceID))
		}
		return out
	}
	return nil
}

// JobPrincipal is whom a job's code acts as: the submitting user for
// identity user_identity or aml_token; for managed (or no identity) the
// identity it names or the compute's; "" when the job acts as nobody.
func JobPrincipal(j *api.Job, c *api.Compute) string {
	if id := j.Identity; id != nil && id.Type != "managed" {
		return j.CreatedBy
	}
	if id := j.Identity; id != nil {
		for _, ref := range []string{id.ResourceID, id.ClientID, id.ObjectID} {
			if ref != "" {
				return IdentityName(ref)
			}
		}
	}
	if ids := computeIdentities(c); len(ids) > 0 {
		return ids[0]
	}
	return ""
}

// checkJobIdentity refuses a managed identity the compute does not have.
func checkJobIdentity(j *api.Job, c *api.Compute) error {
	id := j.Identity
	if id == nil || id.Type != "managed" {
		return nil
	}
	ids := computeIdentities(c)
	if len(ids) == 0 {
		return &Error{Status: 400, Code: api.CodeValidation, Field: "identity",
			Msg: fmt.Sprintf("identity: type managed, but compute %q has no identity; give it one (identity: {type: system_assigned}) or use type: user_identity", c.Name)}
	}
	if want := JobPrincipal(j, c); want != ids[0] && !contains(ids, want) {
		return &Error{Status: 400, Code: api.CodeValidation, Field: "identity",
			Msg: fmt.Sprintf("identity: %q is not an identity of compute %q (it has %v)", want, c.Name, ids)}
	}
	return nil
}

// checkComputeIdentities refuses user-assigned identities that do not
// exist.
func checkComputeIdentities(ctx context.Context, tx store.Tx, c *api.Compute) error {
	if c.Instance != nil && c.CreateOnBehalfOf != nil {
		// tide has one tenant: user_object_id names the tide user the
		// instance is assigned to.
		name := c.CreateOnBehalfOf.UserObjectID
		u, err := getObject[api.User](ctx, tx, kindUser, name)
		if store.IsNotFound(err) || err == nil && u.Kind == api.PrincipalIdentity {
			return &Error{Status: 400, Code: api.CodeValidation, Field: "create_on_behalf_of.user_object_id",
				Msg: fmt.Sprintf("create_on_behalf_of.user_object_id: %q is not a tide user; name a user from 'tide user list' (the instance is assigned to them)", name)}
		}
		if err != nil {
			return err
		}
	}
	if c.Identity == nil || c.Identity.Type != "user_assigned" {
		return nil
	}
	for i, r := range c.Identity.UserAssignedIdentities {
		name := IdentityName(r.ResourceID)
		u, err := getObject[api.User](ctx, tx, kindUser, name)
		if store.IsNotFound(err) || err == nil && u.Kind != api.PrincipalIdentity {
			return &Error{Status: 400, Code: api.CodeValidation, Field: fmt.Sprintf("identity.user_assigned_identities[%d].resource_id", i),
				Msg: fmt.Sprintf("identity.user_assigned_identities[%d].resource_id: identity %q does not exist; create it with 'tide identity create %s'", i, name, name)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
