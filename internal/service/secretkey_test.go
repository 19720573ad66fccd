package service

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// TestRotateSecretKey: a rotation seals every workspace secret and
// datastore credential again with a new key and replaces the key file;
// every value opens with the new key (after a restart too) and none with
// the old one. A rotation interrupted after its new key was written is
// finished by the next start's ResealSecrets. A datastore stored before
// credentials had records of their own is moved out of its document.
func TestRotateSecretKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "tide.db")
	st, err := sqlite.Open(ctx, dbPath, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	svc := &Service{Store: st, SecretBox: box, Now: time.Now}
	if err := st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "w"}); err != nil {
			return err
		}
		// A datastore stored when documents held their key in clear.
		return tx.PutDatastore(ctx, &api.Datastore{Name: "legacy", Workspace: "w", Type: api.DatastoreAzureBlob, AccountName: "acct", ContainerName: "data",
			Credentials: &api.DatastoreCredentials{SASToken: "sv=LEGACY-SAS"}}, "")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetSecret(ctx, api.Secret{Name: "token", Workspace: "w", Value: "TOKEN-VALUE"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutDatastore(ctx, "w", &api.Datastore{Name: "blobs", Type: api.DatastoreAzureBlob, AccountName: "acct", ContainerName: "data",
		Credentials: &api.DatastoreCredentials{AccountKey: "QUNDT1VOVC1LRVk="}}); err != nil {
		t.Fatal(err)
	}
	if n, err := ResealSecrets(ctx, st, box); err != nil || n.DatastoreCredentials != 1 || n.Secrets != 0 {
		t.Fatalf("start-up reseal: %+v, %v; want the legacy datastore's credential moved", n, err)
	}
	// values opens every value with a box freshly read from dir (a
	// restart) and checks the database holds none in clear.
	values := func(t *testing.T) {
		t.Helper()
		fresh, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		s2 := &Service{Store: st, SecretBox: fresh, Now: time.Now}
		err = st.View(ctx, func(tx store.Tx) error {
			env, _, err := ResolveSecrets(ctx, tx, fresh, "w", map[string]string{"T": "${{secrets.token}}"})
			if err != nil || env["T"] != "TOKEN-VALUE" {
				t.Errorf("secret after rotation: %v, %v", env, err)
			}
			for name, want := range map[string]string{"blobs": "QUNDT1VOVC1LRVk=", "legacy": "sv=LEGACY-SAS"} {
				d, err := tx.GetDatastore(ctx, "w", name)
				if err != nil {
					return err
				}
				if err := s2.openCredentials(ctx, tx, d); err != nil || d.Credentials.AccountKey+d.Credentials.SASToken != want {
					t.Errorf("datastore %s credentials: %+v, %v; want %s", name, d.Credentials, err, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// (The legacy row was written in clear by this test, so old pages
		// may still hold it; what the service wrote never was.)
		for _, f := range []string{dbPath, dbPath + "-wal"} {
			b, _ := os.ReadFile(f)
			for _, v := range []string{"TOKEN-VALUE", "QUNDT1VOVC1LRVk="} {
				if bytes.Contains(b, []byte(v)) {
					t.Errorf("%s holds %s in clear", f, v)
				}
			}
		}
	}
	values(t)

	oldKey, _ := os.ReadFile(filepath.Join(dir, SecretKeyFile))
	n, err := svc.RotateSecretKey(ctx)
	if err != nil || n.Secrets != 1 || n.DatastoreCredentials != 2 {
		t.Fatalf("RotateSecretKey: %+v, %v; want 1 secret and 2 datastore credentials", n, err)
	}
	newKey, _ := os.ReadFile(filepath.Join(dir, SecretKeyFile))
	if bytes.Equal(oldKey, newKey) {
		t.Fatal("the key file did not change")
	}
	if fi, err := os.Stat(filepath.Join(dir, SecretKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new key file: %v, %v; want mode 600", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, SecretKeyFile+nextKeySuffix)); !os.IsNotExist(err) {
		t.Fatalf("the next key file stayed: %v", err)
	}
	values(t)
	// The old key opens nothing.
	oldDir := t.TempDir()
	os.WriteFile(filepath.Join(oldDir, SecretKeyFile), oldKey, 0o600)
	old, err := OpenSecretBox(filepath.Join(oldDir, SecretKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	st.View(ctx, func(tx store.Tx) error {
		if _, _, err := ResolveSecrets(ctx, tx, old, "w", map[string]string{"T": "${{secrets.token}}"}); err == nil {
			t.Error("the old key still opens the secret")
		}
		return nil
	})
	// A secret set after the rotation is sealed with the new key.
	if _, err := svc.SetSecret(ctx, api.Secret{Name: "later", Workspace: "w", Value: "LATER-VALUE"}); err != nil {
		t.Fatal(err)
	}

	// Interrupted: the new key was written, then the server stopped
	// before re-sealing. The next start finishes the rotation.
	crashed, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := crashed.beginRotation(); err != nil {
		t.Fatal(err)
	}
	next, _ := os.ReadFile(filepath.Join(dir, SecretKeyFile+nextKeySuffix))
	restarted, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ResealSecrets(ctx, st, restarted); err != nil || n.Secrets != 2 || n.DatastoreCredentials != 2 {
		t.Fatalf("finishing the interrupted rotation: %+v, %v", n, err)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, SecretKeyFile)); !bytes.Equal(now, next) {
		t.Fatal("the interrupted rotation's key is not the key now")
	}
	values(t)
	// The first box, which sealed with the key it read at start, notices
	// the rotation in the data folder and opens with the new key.
	st.View(ctx, func(tx store.Tx) error {
		env, _, err := ResolveSecrets(ctx, tx, box, "w", map[string]string{"L": "${{secrets.later}}"})
		if err != nil || env["L"] != "LATER-VALUE" {
			t.Errorf("a box from before two rotations: %v, %v", env, err)
		}
		return nil
	})
}

// TestRotateSecretKeyFailsAndResumes: a value that opens with no key stops
// the rotation, naming it, with nothing re-sealed; the server keeps
// sealing with the new key and opening with both; once the value is gone
// the next rotation finishes with that same new key.
func TestRotateSecretKeyFailsAndResumes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	svc := &Service{Store: st, SecretBox: box, Now: time.Now}
	other, _ := NewSecretBox(bytes.Repeat([]byte{7}, 32))
	if err := st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "w"}); err != nil {
			return err
		}
		bad := storedSecret{Secret: api.Secret{Name: "foreign", Workspace: "w"}}
		bad.seal(other, "from another data folder")
		return putObject(ctx, tx, kindSecret, "w/foreign", bad)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetSecret(ctx, api.Secret{Name: "good", Workspace: "w", Value: "GOOD"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RotateSecretKey(ctx); err == nil || !strings.Contains(err.Error(), `secret "foreign" of workspace w`) || !strings.Contains(err.Error(), "run 'tide secret rotate-key' again") {
		t.Fatalf("rotation over a value no key opens: %v", err)
	}
	next, err := os.ReadFile(filepath.Join(dir, SecretKeyFile+nextKeySuffix))
	if err != nil {
		t.Fatalf("the new key is not kept after a failed rotation: %v", err)
	}
	// Still working: a new secret is sealed with the new key, the old
	// secret still opens.
	if _, err := svc.SetSecret(ctx, api.Secret{Name: "during", Workspace: "w", Value: "DURING"}); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteSecret(ctx, "w", "foreign"); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.RotateSecretKey(ctx); err != nil || n.Secrets != 2 {
		t.Fatalf("rotating again: %+v, %v", n, err)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, SecretKeyFile)); !bytes.Equal(now, next) {
		t.Error("the second rotation did not finish with the first one's new key")
	}
	st.View(ctx, func(tx store.Tx) error {
		env, _, err := ResolveSecrets(ctx, tx, box, "w", map[string]string{"A": "${{secrets.good}}", "B": "${{secrets.during}}"})
		if err != nil || env["A"] != "GOOD" || env["B"] != "DURING" {
			t.Errorf("after the rotation: %v, %v", env, err)
		}
		return nil
	})
}
