package service

import (
	"context"
	"encoding/json"
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

// TestSecretsEncryptedAtRest: a secret set through the service is stored
// sealed (the database holds no value), opens for a job's environment,
// a row stored in clear before encryption is sealed by ResealSecrets
// and still opens, and a box with another key refuses it, saying why.
func TestSecretsEncryptedAtRest(t *testing.T) {
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
	if fi, err := os.Stat(filepath.Join(dir, SecretKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 600", fi, err)
	}
	if again, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile)); err != nil || again.Seal("x", "k") == "" {
		t.Fatalf("reopening the key: %v", err)
	}
	svc := &Service{Store: st, SecretBox: box, Now: time.Now}
	if err := st.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "w"}); err != nil {
			return err
		}
		// A row from before encryption: the value in clear.
		return putObject(ctx, tx, kindSecret, "w/old", storedSecret{Secret: api.Secret{Name: "old", Workspace: "w"}, Value: "old-VALUE"})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetSecret(ctx, api.Secret{Name: "new", Workspace: "w", Value: "new-VALUE"}); err != nil {
		t.Fatal(err)
	}
	if n, err := ResealSecrets(ctx, st, box); err != nil || n.Secrets != 1 {
		t.Fatalf("sealing the clear rows: %+v, %v; want 1", n, err)
	}
	if n, err := ResealSecrets(ctx, st, box); err != nil || n.Secrets != 0 {
		t.Fatalf("sealing again: %+v, %v; want 0", n, err)
	}
	env := map[string]string{"A": "${{secrets.old}}", "B": "x-${{secrets.new}}"}
	err = st.View(ctx, func(tx store.Tx) error {
		docs, err := tx.ListObjects(ctx, kindSecret, "w/")
		if err != nil {
			return err
		}
		for _, d := range docs {
			if strings.Contains(string(d), "VALUE") || !strings.Contains(string(d), `"sealed":"v1:`) {
				t.Errorf("stored secret is not sealed: %s", d)
			}
		}
		got, masks, err := ResolveSecrets(ctx, tx, box, "w", env)
		if err != nil {
			return err
		}
		if got["A"] != "old-VALUE" || got["B"] != "x-new-VALUE" || len(masks) != 2 {
			t.Errorf("resolved %v masks %v", got, masks)
		}
		other, _ := NewSecretBox(make([]byte, 32))
		if _, _, err := ResolveSecrets(ctx, tx, other, "w", env); err == nil || !strings.Contains(err.Error(), SecretKeyFile) {
			t.Errorf("another key opened the secrets or said nothing useful: %v", err)
		}
		// A sealed value copied onto another secret does not open.
		var old, moved storedSecret
		d, _ := tx.GetObject(ctx, kindSecret, "w/old")
		_ = json.Unmarshal(d, &old)
		moved = old
		moved.Name = "new"
		if _, err := moved.open(box); err == nil {
			t.Error("a sealed value opened under another secret's name")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A key file others can read is refused.
	os.Chmod(filepath.Join(dir, SecretKeyFile), 0o644)
	if _, err := OpenSecretBox(filepath.Join(dir, SecretKeyFile)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a readable key file: %v", err)
	}
}
