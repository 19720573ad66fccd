package service

import (
	"testing"

	"github.com/tideml/tide/api"
)

// TestRoleMeanings pins the built-in roles to Azure's meanings.
func TestRoleMeanings(t *testing.T) {
	for _, c := range []struct {
		role string
		perm Perm
		want bool
	}{
		{api.RoleReader, PermJobsRead, true},
		{api.RoleReader, PermSecretsList, false}, // everything but secrets
		{api.RoleReader, PermJobsWrite, false},
		{api.RoleDataScientist, PermJobsWrite, true},
		{api.RoleDataScientist, PermComputesRead, true},
		{api.RoleDataScientist, PermComputesWrite, false}, // no compute create/delete
		{api.RoleDataScientist, PermJobsCancelAny, false}, // only their own jobs
		{api.RoleComputeOperator, PermComputesWrite, true},
		{api.RoleComputeOperator, PermComputesOperate, true},
		{api.RoleComputeOperator, PermJobsWrite, false}, // no jobs
		{api.RoleComputeOperator, PermJobsRead, false},
		{api.RoleContributor, PermJobsCancelAny, true},
		{api.RoleContributor, PermSecretsWrite, true},
		{api.RoleContributor, PermRolesWrite, false}, // all but role assignment
		{api.RoleOwner, PermRolesWrite, true},
		{"", PermWorkspaceRead, false},
	} {
		if got := Allows(c.role, c.perm); got != c.want {
			t.Errorf("Allows(%q, %s) = %v, want %v", c.role, c.perm, got, c.want)
		}
	}
	for _, name := range []string{"owner", "Data Scientist", "azureml compute operator", "AzureML  Data Scientist"} {
		if CanonicalRole(name) == "" {
			t.Errorf("CanonicalRole(%q) = \"\"", name)
		}
	}
	if CanonicalRole("Admin") != "" {
		t.Errorf("CanonicalRole(Admin) is a role")
	}
}
