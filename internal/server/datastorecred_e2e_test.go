package server_test

// Datastore credentials as secrets, against Azurite: stored sealed, never
// shown, given to a node only for its job, and a rotation of the secret
// key that jobs and a restart do not notice.

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/spec"
)

func TestDatastoreCredentialsAreSecretsForReal(t *testing.T) {
	az := azuritetest.Start(t)
	az.Container(t, "data", map[string]string{"example-data/iris.csv": "sepal_length,species\n5.1,setosa\n"})
	dir := t.TempDir()
	in := start(t, dir, "", "")
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()

	// A reference to a secret the workspace does not have is refused.
	bySecret, err := spec.ParseDatastore("ds.yml", []byte("name: bysecret\ntype: azure_blob\naccount_name: "+azuritetest.Account+
		"\ncontainer_name: data\nendpoint_url: "+az.URL+"\ncredentials:\n  account_key: ${{secrets.storage-key}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.client.PutDatastore(ctx, "default", bySecret); err == nil || !strings.Contains(err.Error(), `credentials.account_key: secret "storage-key" does not exist in workspace default; set it with 'tide secret set storage-key'`) {
		t.Fatalf("datastore naming a missing secret: %v", err)
	}
	if _, err := in.client.SetSecret(ctx, "default", "storage-key", azuritetest.Key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.client.PutDatastore(ctx, "default", bySecret); err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.client.PutDatastore(ctx, "default", az.Datastore("literal", "data")); err != nil {
		t.Fatal(err)
	}
	// Users see the reference, or that a key is set; never the key.
	for name, want := range map[string]api.DatastoreCredentials{
		"bysecret": {AccountKey: "${{secrets.storage-key}}"},
		"literal":  {Type: api.CredentialAccountKey},
	} {
		d, err := in.client.Datastore(ctx, "default", name)
		if err != nil || d.Credentials == nil || *d.Credentials != want {
			t.Fatalf("datastore %s as users see it: %+v, %v; want credentials %+v", name, d, err, want)
		}
	}
	if err := in.client.DeleteSecret(ctx, "default", "storage-key"); err == nil || !strings.Contains(err.Error(), "secret storage-key is the credentials of datastore bysecret") {
		t.Fatalf("deleting a secret a datastore uses: %v", err)
	}
	noKeyInDataDir(t, dir)

	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	readBoth := func(when string) {
		t.Helper()
		for _, ds := range []string{"bysecret", "literal"} {
			j := submit(t, in, "command: cat ${{inputs.f}}\ncompute: one-node\ninputs:\n  f:\n    type: uri_file\n    path: azureml://datastores/"+ds+"/paths/example-data/iris.csv\n")
			j = waitJob(t, in, j.Name, 90*time.Second)
			if text := logText(t, in, j.Name); j.Status != api.JobCompleted || !strings.Contains(text, "5.1,setosa") {
				t.Fatalf("%s: job reading datastore %s: %s (%s):\n%s", when, ds, j.Status, j.Error, text)
			}
		}
	}
	readBoth("before the rotation")

	// The node, now idle, gets no credentials; a datastore without any
	// it may still read.
	nodes, err := in.client.Nodes(ctx, "default", "one-node")
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %v, %v", nodes, err)
	}
	tok := in.srv.NodeToken(nodes[0].ID)
	if rec := call(in.srv.Handler(), tok, "GET", "/v1/agent/workspaces/default/datastores/literal", nil); rec.Code != 403 || !strings.Contains(rec.Body.String(), "runs no job that reads or writes datastore literal") {
		t.Errorf("an idle node asking for a datastore's credentials: %d %s", rec.Code, rec.Body)
	}
	if rec := call(in.srv.Handler(), tok, "GET", "/v1/agent/workspaces/default/datastores/workspaceblobstore", nil); rec.Code != 200 {
		t.Errorf("an idle node asking for a local datastore: %d %s", rec.Code, rec.Body)
	}

	keyFile := filepath.Join(dir, service.SecretKeyFile)
	oldKey, _ := os.ReadFile(keyFile)
	rot, err := in.client.RotateSecretKey(ctx)
	if err != nil || rot.Secrets != 1 || rot.DatastoreCredentials != 1 {
		t.Fatalf("RotateSecretKey: %+v, %v; want 1 secret and 1 datastore credential", rot, err)
	}
	if newKey, _ := os.ReadFile(keyFile); bytes.Equal(oldKey, newKey) || len(newKey) != len(oldKey) {
		t.Fatalf("the key file did not change to a new key")
	}
	readBoth("after the rotation")

	addr, token := in.cfg.Listen, in.srv.AdminToken
	in.shutdown()
	in = start(t, dir, addr, token)
	readBoth("after a restart")
	noKeyInDataDir(t, dir)
}

// noKeyInDataDir checks that no file of the data folder (the SQLite
// database among them) holds Azurite's account key in clear.
func noKeyInDataDir(t *testing.T, dir string) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(azuritetest.Key)) {
			t.Errorf("%s holds the account key in clear", p)
		}
		if strings.HasPrefix(e.Name(), "tide.db") {
			n++
		}
		return nil
	})
	if n == 0 && os.Getenv("TIDE_TEST_STORE") != "postgres" {
		t.Errorf("no tide.db in %s: the check read no database", dir)
	}
}
