package service

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tideml/tide/internal/store"
)

// SecretKeyFile is the file in the data folder that holds the key
// workspace secrets are encrypted with (AES-256-GCM), mode 0600.
const SecretKeyFile = "secrets.key"

// sealedPrefix starts a sealed value: "v1:" + base64(nonce | ciphertext).
const sealedPrefix = "v1:"

// SecretBox encrypts workspace secrets at rest: the store holds only what
// Seal returns, and the key stays in the data folder, out of the database
// and its backups.
type SecretBox struct {
	aead cipher.AEAD
}

// OpenSecretBox reads the key in dataDir, creating it on the first start.
// Replicas sharing the data folder may start together: the key is
// written aside and linked into place, so exactly one key wins and every
// replica reads that one.
func OpenSecretBox(dataDir string) (*SecretBox, error) {
	path := filepath.Join(dataDir, SecretKeyFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := createSecretKey(dataDir, path); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret key %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret key %s: mode %o lets others read it; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("secret key %s: want 64 hex digits (an AES-256 key); restore the file from a backup of the data folder (without it the stored secrets cannot be read)", path)
	}
	return NewSecretBox(key)
}

// createSecretKey writes a new random key aside and links it to path; a
// key another replica linked first wins.
func createSecretKey(dataDir, path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dataDir, SecretKeyFile+".*")
	if err != nil {
		return fmt.Errorf("secret key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("secret key %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secret key %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("secret key %s: %w", path, err)
	}
	return nil
}

// NewSecretBox makes a box with a 32-byte key.
func NewSecretBox(key []byte) (*SecretBox, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &SecretBox{aead: aead}, nil
}

// Seal encrypts a value; additional is bound to it (the secret's key), so
// a sealed value moved to another secret does not open.
func (b *SecretBox) Seal(value, additional string) string {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return sealedPrefix + base64.StdEncoding.EncodeToString(b.aead.Seal(nonce, nonce, []byte(value), []byte(additional)))
}

// Open decrypts what Seal returned.
func (b *SecretBox) Open(sealed, additional string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sealed, sealedPrefix))
	if err != nil || !strings.HasPrefix(sealed, sealedPrefix) || len(raw) < b.aead.NonceSize() {
		return "", errors.New("not a sealed value")
	}
	n := b.aead.NonceSize()
	out, err := b.aead.Open(nil, raw[:n], raw[n:], []byte(additional))
	if err != nil {
		return "", fmt.Errorf("it does not open with the key in %s (a key from another data folder?)", SecretKeyFile)
	}
	return string(out), nil
}

// sealSecret puts a secret's value into its stored form.
func (b *SecretBox) sealSecret(st *storedSecret) {
	if b == nil || st.Value == "" {
		return
	}
	st.Sealed, st.Value = b.Seal(st.Value, secretKey(st.Workspace, st.Name)), ""
}

// openSecret returns a stored secret's value.
func (b *SecretBox) openSecret(st *storedSecret) (string, error) {
	if st.Sealed == "" {
		return st.Value, nil // stored before encryption; SealStoredSecrets seals it
	}
	if b == nil {
		return "", fmt.Errorf("secret %q of workspace %s is encrypted and this server has no key", st.Name, st.Workspace)
	}
	v, err := b.Open(st.Sealed, secretKey(st.Workspace, st.Name))
	if err != nil {
		return "", fmt.Errorf("secret %q of workspace %s: %w", st.Name, st.Workspace, err)
	}
	return v, nil
}

// SealStoredSecrets encrypts every secret still stored in clear (set
// before secrets were encrypted at rest) and returns how many it sealed.
// The server runs it at every start; it does nothing once all are sealed.
func SealStoredSecrets(ctx context.Context, st store.Store, box *SecretBox) (int, error) {
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		n = 0
		all, err := listObjects[storedSecret](ctx, tx, kindSecret, "")
		if err != nil {
			return err
		}
		for _, sec := range all {
			if sec.Sealed != "" || sec.Value == "" {
				continue
			}
			box.sealSecret(&sec)
			if err := putObject(ctx, tx, kindSecret, secretKey(sec.Workspace, sec.Name), sec); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
