package filestore_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/filestore"
)

// Every implementation passes the same suite: the local folder, and a
// blob container on a real Azurite.
func TestStores(t *testing.T) {
	ctx := context.Background()
	t.Run("local", func(t *testing.T) {
		st, err := filestore.Open(ctx, &api.Datastore{Type: api.DatastoreLocal, Path: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		conformance(t, st)
	})
	t.Run("azure_blob", func(t *testing.T) {
		az := azuritetest.Start(t)
		st, err := filestore.Open(ctx, az.Datastore("storage", "server-files")) // made by Open
		if err != nil {
			t.Fatal(err)
		}
		conformance(t, st)
		bad := az.Datastore("storage", "server-files")
		bad.Credentials.AccountKey = strings.Repeat("A", 86) + "=="
		if _, err := filestore.Open(ctx, bad); err == nil || !strings.Contains(err.Error(), "storage: authentication failed for account devstoreaccount1") || !strings.Contains(err.Error(), "check storage.account_key") {
			t.Errorf("wrong account key: %v", err)
		}
	})
}

func conformance(t *testing.T, st filestore.Store) {
	ctx := context.Background()
	read := func(name string) (string, error) {
		r, n, err := st.Open(ctx, name)
		if err != nil {
			return "", err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if int64(len(b)) != n {
			t.Errorf("%s: Open said %d bytes, read %d", name, n, len(b))
		}
		return string(b), err
	}
	put := func(name, body string) {
		t.Helper()
		if err := st.Put(ctx, name, strings.NewReader(body)); err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
	}
	put("artifacts/ws/j/outputs/a.txt", "one")
	put("artifacts/ws/j/outputs/sub/b.txt", "two")
	put("artifacts/ws/j/outputs/a.txt", "one again") // replaced
	if got, err := read("artifacts/ws/j/outputs/a.txt"); got != "one again" || err != nil {
		t.Errorf("read back: %q, %v", got, err)
	}
	// A failed upload leaves the file as it was.
	if err := st.Put(ctx, "artifacts/ws/j/outputs/a.txt", io.MultiReader(strings.NewReader("half"), iotest.ErrReader(errors.New("cut")))); err == nil {
		t.Error("a Put whose reader failed succeeded")
	}
	if got, _ := read("artifacts/ws/j/outputs/a.txt"); got != "one again" {
		t.Errorf("after a failed Put: %q", got)
	}
	if _, err := read("artifacts/ws/j/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	files, err := st.List(ctx, "artifacts/ws/j")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if want := []string{"outputs/a.txt", "outputs/sub/b.txt"}; !slices.Equal(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	if files, err := st.List(ctx, "artifacts/ws/none"); err != nil || len(files) != 0 {
		t.Errorf("List of nothing: %v, %v", files, err)
	}
	// An empty folder exists; a missing one does not.
	if err := st.MakeFolder(ctx, "artifacts/ws/j/outputs/empty"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"artifacts/ws/j/outputs/empty": true, "artifacts/ws/j/outputs": true,
		"artifacts/ws/j/outputs/a.txt": true, "artifacts/ws/j/outputs/missing": false, "artifacts/ws/j/outputs/a": false} {
		if got, err := st.Exists(ctx, name); got != want || err != nil {
			t.Errorf("Exists(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	if files, _ := st.List(ctx, "artifacts/ws/j/outputs/empty"); len(files) != 0 {
		t.Errorf("an empty folder lists %v", files)
	}
	if err := st.Delete(ctx, "artifacts/ws/j/outputs"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := st.Exists(ctx, "artifacts/ws/j/outputs/sub/b.txt"); ok {
		t.Error("Delete left a file of the folder")
	}
	if err := st.Delete(ctx, "artifacts/ws/j/outputs"); err != nil {
		t.Errorf("deleting nothing: %v", err)
	}
	for _, bad := range []string{"../x", "/abs", "a/../../b", ""} {
		if err := st.Put(ctx, bad, strings.NewReader("x")); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
	}
}
