package service

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// Perm is something a principal may do in a workspace. Routes name the
// Perm they need; roles grant sets of them.
type Perm string

// Workspace permissions.
const (
	PermWorkspaceRead   Perm = "workspace/read"   // the workspace, its roles
	PermComputesRead    Perm = "computes/read"    // computes, nodes, compute events and history
	PermComputesWrite   Perm = "computes/write"   // create, update, delete, preempt computes
	PermComputesOperate Perm = "computes/operate" // start, stop, restart instances
	PermJobsRead        Perm = "jobs/read"        // jobs, logs, events, artifacts
	PermJobsWrite       Perm = "jobs/write"       // submit; cancel one's own jobs
	PermJobsCancelAny   Perm = "jobs/cancel-any"  // cancel anyone's jobs
	PermDataRead        Perm = "data/read"        // datastores, environments, data assets, components
	PermDataWrite       Perm = "data/write"       // create and delete them
	PermSecretsList     Perm = "secrets/list"     // secret names (never values)
	PermSecretsWrite    Perm = "secrets/write"    // set and delete secrets
	PermCostRead        Perm = "cost/read"        // cost, budgets
	PermCostWrite       Perm = "cost/write"       // create and delete budgets
	PermRolesWrite      Perm = "roles/write"      // assign and remove roles
)

var rolePerms = map[string][]Perm{
	api.RoleReader: {PermWorkspaceRead, PermComputesRead, PermJobsRead, PermDataRead, PermCostRead},
	api.RoleDataScientist: {PermWorkspaceRead, PermComputesRead, PermComputesOperate, PermJobsRead, PermJobsWrite,
		PermDataRead, PermDataWrite, PermSecretsList, PermCostRead},
	api.RoleComputeOperator: {PermWorkspaceRead, PermComputesRead, PermComputesWrite, PermComputesOperate, PermCostRead},
	api.RoleContributor: {PermWorkspaceRead, PermComputesRead, PermComputesWrite, PermComputesOperate, PermJobsRead,
		PermJobsWrite, PermJobsCancelAny, PermDataRead, PermDataWrite, PermSecretsList, PermSecretsWrite, PermCostRead, PermCostWrite},
	api.RoleOwner: {PermWorkspaceRead, PermComputesRead, PermComputesWrite, PermComputesOperate, PermJobsRead,
		PermJobsWrite, PermJobsCancelAny, PermDataRead, PermDataWrite, PermSecretsList, PermSecretsWrite, PermCostRead,
		PermCostWrite, PermRolesWrite},
}

// Allows reports whether role grants p.
func Allows(role string, p Perm) bool { return slices.Contains(rolePerms[role], p) }

// PermsOf lists what role grants.
func PermsOf(role string) []Perm { return slices.Clone(rolePerms[role]) }

// RolesWith lists the built-in roles that grant p, least allowed first.
func RolesWith(p Perm) []string {
	var out []string
	for _, r := range api.Roles {
		if Allows(r, p) {
			out = append(out, r)
		}
	}
	return out
}

// CanonicalRole returns the built-in role a name means (case and spacing
// aside; "Data Scientist" and "Compute Operator" without "AzureML"), or "".
func CanonicalRole(name string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.Join(strings.Fields(strings.TrimPrefix(s, "AzureML ")), " "))
	}
	for _, r := range api.Roles {
		if norm(r) == norm(name) || norm(r) == norm(strings.TrimPrefix(strings.TrimSpace(name), "azureml ")) {
			return r
		}
	}
	return ""
}

func roleKey(workspace, principal string) string { return workspace + "/" + principal }

// RoleOf returns principal's role in a workspace, "" when it has none.
func RoleOf(ctx context.Context, tx store.Tx, workspace, principal string) (string, error) {
	ra, err := getObject[api.RoleAssignment](ctx, tx, kindRole, roleKey(workspace, principal))
	if store.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return ra.Role, nil
}

// RoleOf returns principal's role in a workspace, "" when it has none.
func (s *Service) RoleOf(ctx context.Context, workspace, principal string) (string, error) {
	var role string
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		role, err = RoleOf(ctx, tx, workspace, principal)
		return err
	})
	return role, err
}

// RoleAssignments lists a workspace's role assignments, or every
// workspace's when workspace is "".
func (s *Service) RoleAssignments(ctx context.Context, workspace string) ([]api.RoleAssignment, error) {
	prefix := ""
	if workspace != "" {
		prefix = workspace + "/"
	}
	var out []api.RoleAssignment
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		out, err = listObjects[api.RoleAssignment](ctx, tx, kindRole, prefix)
		return err
	})
	return out, err
}

// AssignRole gives a user or identity a role in a workspace, replacing the
// role it had there.
func (s *Service) AssignRole(ctx context.Context, ra api.RoleAssignment) (api.RoleAssignment, error) {
	role := CanonicalRole(ra.Role)
	if role == "" {
		return ra, &Error{Status: 400, Code: api.CodeValidation, Field: "role",
			Msg: fmt.Sprintf("role %q: use one of %s", ra.Role, strings.Join(quoteAll(api.Roles), ", "))}
	}
	ra.Role = role
	ra.CreatedOn, ra.CreatedBy = s.now(), UserOf(ctx)
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetWorkspace(ctx, ra.Workspace); store.IsNotFound(err) {
			return notFound("workspace", ra.Workspace, "list workspaces with 'tide workspace list'")
		} else if err != nil {
			return err
		}
		if err := principalExists(ctx, tx, ra.Principal); err != nil {
			return err
		}
		roles, err := listObjects[api.RoleAssignment](ctx, tx, kindRole, ra.Workspace+"/")
		if err != nil {
			return err
		}
		if old := find(roles, ra.Principal); old != nil && old.Role == api.RoleOwner && role != api.RoleOwner {
			if err := checkNotLastOwner(roles, *old); err != nil {
				return err
			}
		}
		return putObject(ctx, tx, kindRole, roleKey(ra.Workspace, ra.Principal), ra)
	})
	return ra, err
}

// principalExists accepts users, identities and compute identities
// ("compute:WORKSPACE/NAME", a compute's system-assigned identity).
func principalExists(ctx context.Context, tx store.Tx, name string) error {
	if rest, ok := strings.CutPrefix(name, "compute:"); ok {
		ws, compute, _ := strings.Cut(rest, "/")
		if _, err := tx.GetCompute(ctx, ws, compute); store.IsNotFound(err) {
			return notFound("compute", rest, "a compute's identity is named compute:WORKSPACE/NAME")
		} else if err != nil {
			return err
		}
		return nil
	}
	if _, err := tx.GetObject(ctx, kindUser, name); store.IsNotFound(err) {
		return notFound("user or identity", name, "create it with 'tide user create' or 'tide identity create'")
	} else if err != nil {
		return err
	}
	return nil
}

func find(roles []api.RoleAssignment, principal string) *api.RoleAssignment {
	for i := range roles {
		if roles[i].Principal == principal {
			return &roles[i]
		}
	}
	return nil
}

// checkNotLastOwner refuses to take away the last Owner of a workspace
// (a workspace nobody owns can only be repaired by a server admin).
func checkNotLastOwner(roles []api.RoleAssignment, leaving api.RoleAssignment) error {
	if leaving.Role != api.RoleOwner {
		return nil
	}
	for _, r := range roles {
		if r.Role == api.RoleOwner && r.Principal != leaving.Principal && r.Workspace == leaving.Workspace {
			return nil
		}
	}
	return errorf(409, api.CodeConflict, "%s is the last Owner of workspace %s; make someone else Owner first", leaving.Principal, leaving.Workspace)
}

// RemoveRole takes a principal's role in a workspace away.
func (s *Service) RemoveRole(ctx context.Context, workspace, principal string) error {
	return s.Store.Update(ctx, func(tx store.Tx) error {
		roles, err := listObjects[api.RoleAssignment](ctx, tx, kindRole, workspace+"/")
		if err != nil {
			return err
		}
		ra := find(roles, principal)
		if ra == nil {
			return notFound("role assignment", principal+" in "+workspace, "list them with 'tide role list'")
		}
		return removeRole(ctx, tx, roles, *ra)
	})
}

func removeRole(ctx context.Context, tx store.Tx, all []api.RoleAssignment, ra api.RoleAssignment) error {
	var same []api.RoleAssignment
	for _, r := range all {
		if r.Workspace == ra.Workspace {
			same = append(same, r)
		}
	}
	if err := checkNotLastOwner(same, ra); err != nil {
		return err
	}
	return tx.DeleteObject(ctx, kindRole, roleKey(ra.Workspace, ra.Principal))
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
