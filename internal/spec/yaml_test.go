package spec_test

import (
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TestEditableYAML: a compute as the server shows it becomes the file a
// user writes: the API's field order, no server-set field (top-level or
// nested), and it parses back to the same settings.
func TestEditableYAML(t *testing.T) {
	c := api.Compute{Name: "cpu", Type: "amlcompute", Size: "Standard_DS3_v2", MinInstances: 0, MaxInstances: 4,
		Workspace: "default", ProvisioningState: "Succeeded", CurrentNodeCount: 1, Etag: "3", Description: "yes: a colon",
		SSHSettings: &api.SSHSettings{AdminUsername: "azureuser", HasSSHKeyValue: true},
		Cost:        &api.Cost{NodeHours: 1, Amount: 0.2, Currency: "USD"}}
	b, err := spec.EditableYAML(spec.KindCompute, c)
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	if !strings.HasPrefix(y, "name: cpu\n") {
		t.Errorf("not in the API's order (name first):\n%s", y)
	}
	for _, set := range []string{"etag", "provisioning_state", "current_node_count", "cost:", "has_ssh_key_value", "workspace"} {
		if strings.Contains(y, set) {
			t.Errorf("server-set field %s in the file:\n%s", set, y)
		}
	}
	back, err := spec.ParseCompute("cpu.yml", b, nil)
	if err != nil {
		t.Fatalf("the file does not parse back: %v\n%s", err, y)
	}
	if back.MaxInstances != 4 || back.Description != c.Description || back.SSHSettings == nil || back.SSHSettings.AdminUsername != "azureuser" {
		t.Errorf("parsed back as %+v", back)
	}
}
