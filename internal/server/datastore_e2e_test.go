package server_test

// End-to-end tests of the default datastores every workspace has.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/config"
)

// TestDefaultDatastoresForReal runs Azure's datastore example paths
// unchanged against the default local workspaceblobstore, writes an output
// to workspaceartifactstore, then points workspaceblobstore at a blob
// container (Azurite) in the server config.
func TestDefaultDatastoresForReal(t *testing.T) {
	in, dir := newServer(t)
	ctx := context.Background()
	ds, err := in.client.Datastores(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name+"="+d.Type)
	}
	if strings.Join(names, ",") != "workspaceartifactstore=local,workspaceblobstore=local" {
		t.Fatalf("datastores of a new workspace: %v", names)
	}
	blobstore := filepath.Join(dir, "datastores", "default", "workspaceblobstore")
	if ds[1].Path != blobstore {
		t.Fatalf("workspaceblobstore path %q, want %q", ds[1].Path, blobstore)
	}
	os.MkdirAll(filepath.Join(blobstore, "example-data"), 0o755)
	if err := os.WriteFile(filepath.Join(blobstore, "example-data", "iris.csv"), []byte("5.1,setosa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := in.client.DeleteDatastore(ctx, "default", "workspaceblobstore"); err == nil || !strings.Contains(err.Error(), "default datastore, set by the server config") {
		t.Fatalf("deleting a default datastore: %v", err)
	}
	createCompute(t, in, cluster)
	j := submit(t, in, "command: cat ${{inputs.iris_csv}} > ${{outputs.copy}}/iris.csv\ncompute: cpu-cluster\ninputs:\n  iris_csv:\n    type: uri_file\n    path: azureml://datastores/workspaceblobstore/paths/example-data/iris.csv\noutputs:\n  copy:\n    path: azureml://datastores/workspaceartifactstore/paths/runs/${{name}}/\n")
	j = waitJob(t, in, j.Name, 60*time.Second)
	if j.Status != api.JobCompleted {
		t.Fatalf("%s: %s (%s)\n%s", j.Name, j.Status, j.Error, logText(t, in, j.Name))
	}
	out := filepath.Join(dir, "datastores", "default", "workspaceartifactstore", "runs", j.Name, "iris.csv")
	if b, err := os.ReadFile(out); err != nil || string(b) != "5.1,setosa\n" {
		t.Fatalf("output in workspaceartifactstore: %q, %v", b, err)
	}

	// An operator points workspaceblobstore at a blob container.
	az := azuritetest.Start(t)
	az.Container(t, "workspace", map[string]string{"example-data/iris.csv": "6.3,virginica\n"})
	blobDir := t.TempDir()
	in2 := startWith(t, blobDir, "", "", func(c *config.Server) {
		c.DefaultDatastores = map[string]config.DatastoreConfig{"workspaceblobstore": {Type: "azure_blob",
			AccountName: azuritetest.Account, ContainerName: "workspace", EndpointURL: az.URL, AccountKey: azuritetest.Key}}
	})
	t.Cleanup(func() { cleanup(t, in2) })
	d, err := in2.client.Datastore(ctx, "default", "workspaceblobstore")
	if err != nil || d.Type != api.DatastoreAzureBlob || d.Credentials.AccountKey != "" || d.Credentials.Type != api.CredentialAccountKey {
		t.Fatalf("configured workspaceblobstore as users see it: %+v %+v, %v", d, d.Credentials, err)
	}
	createCompute(t, in2, cluster)
	j2 := submit(t, in2, "command: cat ${{inputs.iris_csv}}\ncompute: cpu-cluster\ninputs:\n  iris_csv:\n    type: uri_file\n    path: wasbs://workspace@devstoreaccount1.blob.core.windows.net/example-data/iris.csv\n")
	j2 = waitJob(t, in2, j2.Name, 60*time.Second)
	if text := logText(t, in2, j2.Name); j2.Status != api.JobCompleted || !strings.Contains(text, "virginica") {
		t.Fatalf("%s: %s (%s)\n%s", j2.Name, j2.Status, j2.Error, text)
	}
}
