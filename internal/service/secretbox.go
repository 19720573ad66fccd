package service

import (
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
	"sync"
)

// SecretKeyFile is the file in the data folder that holds the key
// workspace secrets and datastore credentials are encrypted with
// (AES-256-GCM), mode 0600. During a key rotation the new key waits in
// SecretKeyFile+".next" until every value is sealed with it.
const SecretKeyFile = "secrets.key"

// nextKeySuffix names the key a rotation moves to.
const nextKeySuffix = ".next"

// sealedPrefix starts a sealed value: "v1:" + base64(nonce | ciphertext).
const sealedPrefix = "v1:"

// SecretBox encrypts secrets at rest: the store holds only what Seal
// returns, and the key stays in the data folder, out of the database and
// its backups.
//
// A box holds one key, or two while a rotation is under way: it seals
// with the new one and opens with either. Replicas sharing the data
// folder notice a rotation another replica made by the key files
// changing, so none keeps sealing with a retired key.
type SecretBox struct {
	path string // the key file; "" for a box made with NewSecretBox

	mu    sync.Mutex
	keys  []cipher.AEAD  // keys[0] seals; every key opens
	files [2]os.FileInfo // the key files as last read (current, next)

	// rotation serialises rotations and the start-up re-seal.
	rotation sync.Mutex
}

// OpenSecretBox reads the key in the file path (the data folder's
// SecretKeyFile, or the server config's secrets_key_file), creating it on
// the first start.
// Replicas sharing the data folder may start together: the key is
// written aside and linked into place, so exactly one key wins and every
// replica reads that one. A SecretKeyFile+".next" left by a rotation
// that did not finish is read too; ResealSecrets finishes the rotation.
func OpenSecretBox(path string) (*SecretBox, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
	}
	b := &SecretBox{path: path}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.load(); err != nil {
		return nil, err
	}
	return b, nil
}

// NewSecretBox makes a box with a 32-byte key.
func NewSecretBox(key []byte) (*SecretBox, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &SecretBox{keys: []cipher.AEAD{aead}}, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (b *SecretBox) keyPath() string  { return b.path }
func (b *SecretBox) nextPath() string { return b.keyPath() + nextKeySuffix }

// load reads the key files; b.mu is held.
func (b *SecretBox) load() error {
	cur, curInfo, err := readKeyFile(b.keyPath())
	if err != nil {
		return err
	}
	keys := []cipher.AEAD{cur}
	next, nextInfo, err := readKeyFile(b.nextPath())
	switch {
	case err == nil:
		keys = []cipher.AEAD{next, cur}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	b.keys, b.files = keys, [2]os.FileInfo{curInfo, nextInfo}
	return nil
}

// refresh reloads the keys when another replica rotated them; b.mu is
// held. It reports whether they changed.
func (b *SecretBox) refresh() bool {
	if b.path == "" {
		return false
	}
	for i, p := range []string{b.keyPath(), b.nextPath()} {
		fi, err := os.Stat(p)
		was := b.files[i]
		if (err == nil) != (was != nil) || err == nil && (!os.SameFile(fi, was) || !fi.ModTime().Equal(was.ModTime())) {
			return b.load() == nil
		}
	}
	return false
}

func readKeyFile(path string) (cipher.AEAD, os.FileInfo, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("secret key %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("secret key %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, nil, fmt.Errorf("secret key %s: mode %o lets others read it; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, nil, fmt.Errorf("secret key %s: want 64 hex digits (an AES-256 key); restore the file from a backup of the data folder (without it the stored secrets cannot be read)", path)
	}
	aead, err := newAEAD(key)
	return aead, fi, err
}

// createKeyFile writes a new random key aside and links it to path; a
// key another replica linked first wins.
func createKeyFile(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("secret key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("secret key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("secret key %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
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

// Seal encrypts a value; additional is bound to it (the secret's key), so
// a sealed value moved to another secret does not open.
func (b *SecretBox) Seal(value, additional string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	aead := b.keys[0]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return sealedPrefix + base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(value), []byte(additional)))
}

// Open decrypts what Seal returned, with whichever key sealed it.
func (b *SecretBox) Open(sealed, additional string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sealed, sealedPrefix))
	if err != nil || !strings.HasPrefix(sealed, sealedPrefix) {
		return "", errors.New("not a sealed value")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for range 2 {
		for _, aead := range b.keys {
			n := aead.NonceSize()
			if len(raw) < n {
				return "", errors.New("not a sealed value")
			}
			if out, err := aead.Open(nil, raw[:n], raw[n:], []byte(additional)); err == nil {
				return string(out), nil
			}
		}
		if !b.refresh() {
			break
		}
	}
	return "", fmt.Errorf("it does not open with the key in %s (a key from another data folder?)", b.keyName())
}

// seal returns a value's stored form: sealed, or in clear without a box.
func (b *SecretBox) seal(value, additional string) (clear, sealed string) {
	if b == nil || value == "" {
		return value, ""
	}
	return "", b.Seal(value, additional)
}

// open returns the value of a stored form; what names it in errors.
func (b *SecretBox) open(clear, sealed, additional, what string) (string, error) {
	if sealed == "" {
		return clear, nil // stored before encryption; ResealSecrets seals it
	}
	if b == nil {
		return "", fmt.Errorf("%s is encrypted and this server has no key", what)
	}
	v, err := b.Open(sealed, additional)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// rotating reports whether a rotation is under way (two keys).
func (b *SecretBox) rotating() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	return len(b.keys) > 1
}

// beginRotation makes a new key, written to SecretKeyFile+".next", and
// seals with it from now on while still opening with the old one. A
// rotation already under way (one that failed or was interrupted) goes
// on with its new key.
func (b *SecretBox) beginRotation() error {
	if b.path == "" {
		return errors.New("this server keeps no secret key file to rotate")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	if len(b.keys) > 1 {
		return nil
	}
	if err := createKeyFile(b.nextPath()); err != nil {
		return err
	}
	return b.load()
}

// finishRotation makes the new key the only one: the rename replaces the
// old key file in one step, so the old key is gone from the data folder.
func (b *SecretBox) finishRotation() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := os.Rename(b.nextPath(), b.keyPath()); err != nil {
		return fmt.Errorf("secret key rotation: %w", err)
	}
	if d, err := os.Open(filepath.Dir(b.path)); err == nil {
		_ = d.Sync() // make the rename durable before the old key is forgotten
		d.Close()
	}
	return b.load()
}

// keyName names the key file in messages.
func (b *SecretBox) keyName() string {
	if b.path == "" {
		return SecretKeyFile
	}
	return b.path
}
