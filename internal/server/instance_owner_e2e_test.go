package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TestInstanceAssignedUser (issue 14, create_on_behalf_of): an instance
// created for ana is hers. bob, a Data Scientist of the same workspace,
// gets a 403 naming the instance and its owner on start, stop, Jupyter
// and SSH; ana and the admin may stop and start it. A user_object_id that
// names no tide user is refused at create.
func TestInstanceAssignedUser(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	admin := in.client
	clients, tokens := map[string]*api.Client{}, map[string]string{}
	for _, name := range []string{"ana", "bob"} {
		nu, err := admin.CreateUser(ctx, api.User{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = nu.Token.Secret
		if clients[name], err = api.NewClient(in.cfg.AdvertiseURL, nu.Token.Secret, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.AssignRole(ctx, "default", name, "AzureML Data Scientist"); err != nil {
			t.Fatal(err)
		}
	}
	ana, bob := clients["ana"], clients["bob"]
	const doc = "name: anas\ntype: computeinstance\nsize: Standard_DS3_v2\ncreate_on_behalf_of:\n  user_tenant_id: t\n  user_object_id: %s\n"
	ghost, err := spec.ParseCompute("c.yml", []byte(strings.Replace(doc, "%s", "ghost", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.PutCompute(ctx, "default", ghost); !isStatus(err, 400) || !strings.Contains(err.Error(), `create_on_behalf_of.user_object_id: "ghost" is not a tide user`) {
		t.Errorf("an instance for a user that does not exist: %v", err)
	}
	createCompute(t, in, strings.Replace(doc, "%s", "ana", 1))
	waitState(t, in, "anas", api.InstanceRunning, 60*time.Second)

	want := "compute instance anas is assigned to ana (create_on_behalf_of)"
	for _, op := range []string{api.OperationStop, api.OperationStart, api.OperationRestart} {
		if _, err := bob.InstanceOperation(ctx, "default", "anas", op); !isStatus(err, 403) || !strings.Contains(err.Error(), want) {
			t.Errorf("bob %s: %v; want 403 saying %q", op, err, want)
		}
	}
	for path, what := range map[string]string{"/instances/anas/jupyter/api/status": "Jupyter", "/computes/anas/ssh": "SSH"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", in.cfg.AdvertiseURL+"/v1/workspaces/default"+path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens["bob"])
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", api.SSHUpgrade)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), want) {
			t.Errorf("bob's %s: %d %s; want 403 saying %q", what, resp.StatusCode, body, want)
		}
	}
	if _, err := ana.InstanceOperation(ctx, "default", "anas", api.OperationStop); err != nil {
		t.Fatalf("ana stopping her instance: %v", err)
	}
	waitState(t, in, "anas", api.InstanceStopped, 60*time.Second)
	if _, err := admin.InstanceOperation(ctx, "default", "anas", api.OperationStart); err != nil {
		t.Fatalf("the admin starting ana's instance: %v", err)
	}
	waitState(t, in, "anas", api.InstanceRunning, 60*time.Second)
}
