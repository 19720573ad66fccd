package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// ResealSecrets brings every stored secret to its sealed form with the
// box's current key, in one store transaction: workspace secrets stored
// in clear before encryption, datastore credentials kept in datastore
// documents before they had records of their own, and, while a key
// rotation is under way, every value (then the old key is retired). The
// server runs it at every start, which also finishes a rotation a crash
// interrupted; it does nothing when all is sealed with the one key.
func ResealSecrets(ctx context.Context, st store.Store, box *SecretBox) (api.SecretKeyRotation, error) {
	if box != nil {
		box.rotation.Lock()
		defer box.rotation.Unlock()
	}
	return reseal(ctx, st, box)
}

// RotateSecretKey makes a new secret key, re-seals every workspace secret
// and datastore credential with it in one transaction, then replaces the
// key file with it (a rename), so the old key opens nothing any more. A
// failure leaves the server with both keys, sealing with the new one;
// running it again, or restarting the server, finishes the rotation.
func (s *Service) RotateSecretKey(ctx context.Context) (api.SecretKeyRotation, error) {
	box := s.SecretBox
	if box == nil {
		return api.SecretKeyRotation{}, errorf(409, api.CodeConflict, "this server keeps secrets in clear (no secret key); there is no key to rotate")
	}
	box.rotation.Lock()
	defer box.rotation.Unlock()
	if err := box.beginRotation(); err != nil {
		return api.SecretKeyRotation{}, fmt.Errorf("rotating the secret key: %w", err)
	}
	out, err := reseal(ctx, s.Store, box)
	if err != nil {
		return out, fmt.Errorf("rotating the secret key: %w (the server seals with the new key and still opens with the old one; run 'tide secret rotate-key' again to finish)", err)
	}
	return out, nil
}

// reseal is ResealSecrets with box.rotation held.
func reseal(ctx context.Context, st store.Store, box *SecretBox) (api.SecretKeyRotation, error) {
	all := box != nil && box.rotating()
	var out api.SecretKeyRotation
	err := st.Update(ctx, func(tx store.Tx) error {
		out = api.SecretKeyRotation{}
		if err := checkKey(ctx, tx, box, all); err != nil {
			return err
		}
		secrets, err := listObjects[storedSecret](ctx, tx, kindSecret, "")
		if err != nil {
			return err
		}
		for _, sec := range secrets {
			if sec.Sealed == "" && sec.Value == "" || sec.Sealed != "" && !all {
				continue
			}
			v, err := sec.open(box)
			if err != nil {
				return err
			}
			sec.seal(box, v)
			if err := putObject(ctx, tx, kindSecret, secretKey(sec.Workspace, sec.Name), sec); err != nil {
				return err
			}
			out.Secrets++
		}
		creds, err := listObjects[storedCredential](ctx, tx, kindDatastoreCredential, "")
		if err != nil {
			return err
		}
		for _, c := range creds {
			if c.Sealed != "" && !all || c.Sealed == "" && box == nil {
				continue
			}
			v, err := c.open(box)
			if err != nil {
				return err
			}
			c.seal(box, v)
			if err := putObject(ctx, tx, kindDatastoreCredential, secretKey(c.Workspace, c.Datastore), c); err != nil {
				return err
			}
			out.DatastoreCredentials++
		}
		n, err := sealDatastoreDocuments(ctx, tx, box)
		out.DatastoreCredentials += n
		return err
	})
	if err != nil {
		return out, err
	}
	if all {
		err = box.finishRotation()
	}
	return out, err
}

// sealDatastoreDocuments moves the secrets of datastores stored before
// credentials had sealed records of their own out of their documents.
func sealDatastoreDocuments(ctx context.Context, tx store.Tx, box *SecretBox) (int, error) {
	wss, err := tx.ListWorkspaces(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ws := range wss {
		ds, err := tx.ListDatastores(ctx, ws.Name)
		if err != nil {
			return n, err
		}
		for _, d := range ds {
			value, ref := credentialValue(d.Credentials)
			if value == "" || ref != "" {
				continue
			}
			c := storedCredential{Workspace: d.Workspace, Datastore: d.Name, Kind: d.Credentials.Kind()}
			c.seal(box, value)
			if err := putObject(ctx, tx, kindDatastoreCredential, secretKey(d.Workspace, d.Name), c); err != nil {
				return n, err
			}
			d.Credentials = &api.DatastoreCredentials{Type: c.Kind}
			if err := tx.PutDatastore(ctx, &d, ""); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// keyCheckSetting is the store setting holding a value sealed with the
// secret key. Every replica opens it at start: one whose key differs (its
// own data dir and no shared secrets_key_file) would otherwise seal
// secrets the other replicas cannot open.
const keyCheckSetting = "secret_key_check"

// ErrKeyMismatch: this server's secret key is not the one the store's
// secrets are sealed with.
var ErrKeyMismatch = errors.New("secret key differs from the other replicas'")

// checkKey opens the store's check value with box, and seals it anew when
// there is none or a rotation re-seals everything.
func checkKey(ctx context.Context, tx store.Tx, box *SecretBox, all bool) error {
	if box == nil {
		return nil
	}
	v, err := tx.GetSetting(ctx, keyCheckSetting)
	switch {
	case store.IsNotFound(err):
	case err != nil:
		return err
	default:
		if _, err := box.Open(v, keyCheckSetting); err != nil {
			return fmt.Errorf("%w: the key in %s does not open what the other replicas sealed; give every replica the same key (copy the first replica's key file, or point secrets_key_file at a copy of it) and start again", ErrKeyMismatch, box.keyName())
		}
		if !all {
			return nil
		}
	}
	return tx.PutSetting(ctx, keyCheckSetting, box.Seal(keyCheckSetting, keyCheckSetting))
}
