package azureblob_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
)

// TestStoreAgainstAzurite lists, downloads and uploads against a real blob
// service, and checks that its errors say what to fix.
func TestStoreAgainstAzurite(t *testing.T) {
	az := azuritetest.Start(t)
	ctx := context.Background()
	st := az.Container(t, "data", map[string]string{
		"iris/iris.csv":      "5.1,3.5,setosa\n",
		"iris/more/b.txt":    "b\n",
		"iris/":              "", // a folder marker, as tools leave them
		"other/x.txt":        "x\n",
		"irises-not-a-child": "no\n",
	})

	objs, err := st.List(ctx, "iris")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
		if o.Version == "" {
			t.Errorf("%s has no version", o.Name)
		}
	}
	if strings.Join(names, ",") != "iris.csv,more/b.txt" {
		t.Fatalf("List(iris) = %v", names)
	}

	dir := t.TempDir()
	if _, err := st.DownloadFile(ctx, "iris/iris.csv", filepath.Join(dir, "a", "iris.csv")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a", "iris.csv")); string(b) != "5.1,3.5,setosa\n" {
		t.Fatalf("downloaded %q", b)
	}

	src := filepath.Join(dir, "out")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "model.txt"), []byte("weights"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "m.json"), []byte("{}"), 0o644)
	if n, err := st.UploadTree(ctx, src, "runs/r1"); err != nil || n != 2 {
		t.Fatalf("UploadTree = %d, %v", n, err)
	}
	if b, err := st.ReadBytes(ctx, "runs/r1/sub/m.json"); err != nil || string(b) != "{}" {
		t.Fatalf("read back %q, %v", b, err)
	}

	// Errors a user can act on.
	_, err = st.DownloadFile(ctx, "iris/missing.csv", filepath.Join(dir, "m.csv"))
	if err == nil || !strings.Contains(err.Error(), "datastore setup: no blob at "+az.URL+"/data/iris/missing.csv") {
		t.Errorf("missing blob: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "m.csv")); !os.IsNotExist(err) {
		t.Errorf("a failed download left a file: %v", err)
	}
	bad := az.Datastore("wrongkey", "data")
	bad.Credentials = &api.DatastoreCredentials{AccountKey: "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXk="}
	wrong, err := azureblob.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.List(ctx, "iris"); err == nil || !strings.Contains(err.Error(), "datastore wrongkey: authentication failed for account devstoreaccount1") {
		t.Errorf("wrong key: %v", err)
	}
	nocont, err := azureblob.New(az.Datastore("nocont", "missing"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nocont.List(ctx, ""); err == nil || !strings.Contains(err.Error(), "datastore nocont: container missing not found in account devstoreaccount1") {
		t.Errorf("missing container: %v", err)
	}
}

// TestSASSignatureNotInErrors: the SDK's transport errors quote the
// request URL, SAS token and all; the signature is taken out.
func TestSASSignatureNotInErrors(t *testing.T) {
	st, err := azureblob.New(&api.Datastore{Name: "d", Type: api.DatastoreAzureBlob, AccountName: "devstoreaccount1", ContainerName: "data",
		EndpointURL: "http://127.0.0.1:1/devstoreaccount1", Credentials: &api.DatastoreCredentials{SASToken: "sv=2020-10-02&sig=SECRET%2Bsig"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.List(context.Background(), "x")
	if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "sig=REDACTED") {
		t.Errorf("error from an unreachable service: %v; want the signature redacted", err)
	}
}
