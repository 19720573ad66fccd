package service

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

var (
	secretNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,127}$`)
	// secretRefRE is how a job's environment_variables name a secret:
	// ${{secrets.NAME}}, alone or inside a longer value.
	secretRefRE = regexp.MustCompile(`\$\{\{\s*secrets\.([A-Za-z][A-Za-z0-9_-]*)\s*\}\}`)
)

// storedSecret is a secret as the store keeps it: the value sealed with
// the server's SecretBox (Value is set only in rows stored before
// secrets were encrypted, until ResealSecrets seals them).
type storedSecret struct {
	api.Secret
	Value  string `json:"value,omitempty"`
	Sealed string `json:"sealed,omitempty"`
}

func secretKey(workspace, name string) string { return workspace + "/" + name }

// seal puts value into the stored form, bound to the secret's key.
func (st *storedSecret) seal(box *SecretBox, value string) {
	st.Value, st.Sealed = box.seal(value, secretKey(st.Workspace, st.Name))
}

// open returns the secret's value.
func (st *storedSecret) open(box *SecretBox) (string, error) {
	return box.open(st.Value, st.Sealed, secretKey(st.Workspace, st.Name),
		fmt.Sprintf("secret %q of workspace %s", st.Name, st.Workspace))
}

// SetSecret creates or replaces a workspace secret. The answer never
// holds the value.
func (s *Service) SetSecret(ctx context.Context, sec api.Secret) (api.Secret, error) {
	if !secretNameRE.MatchString(sec.Name) {
		return api.Secret{}, &Error{Status: 400, Code: api.CodeValidation, Field: "name",
			Msg: fmt.Sprintf("secret name %q: use up to 128 letters, digits, '_' or '-', starting with a letter", sec.Name)}
	}
	if sec.Value == "" {
		return api.Secret{}, &Error{Status: 400, Code: api.CodeValidation, Field: "value", Msg: "secret " + sec.Name + ": the value is empty"}
	}
	sec.UpdatedOn, sec.UpdatedBy = s.now(), UserOf(ctx)
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetWorkspace(ctx, sec.Workspace); store.IsNotFound(err) {
			return notFound("workspace", sec.Workspace, "list workspaces with 'tide workspace list'")
		} else if err != nil {
			return err
		}
		stored := storedSecret{Secret: sec}
		stored.Secret.Value = ""
		stored.seal(s.SecretBox, sec.Value)
		return putObject(ctx, tx, kindSecret, secretKey(sec.Workspace, sec.Name), stored)
	})
	sec.Value = ""
	return sec, err
}

// Secrets lists a workspace's secrets, without values.
func (s *Service) Secrets(ctx context.Context, workspace string) ([]api.Secret, error) {
	var out []api.Secret
	err := s.Store.View(ctx, func(tx store.Tx) error {
		all, err := listObjects[storedSecret](ctx, tx, kindSecret, workspace+"/")
		for _, sec := range all {
			v := sec.Secret
			v.Value = ""
			out = append(out, v)
		}
		return err
	})
	return out, err
}

// DeleteSecret deletes a workspace secret.
func (s *Service) DeleteSecret(ctx context.Context, workspace, name string) error {
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		users, err := datastoresUsingSecret(ctx, tx, workspace, name)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return errorf(409, api.CodeConflict, "secret %s is the credentials of datastore %s; give the datastore other credentials ('tide datastore create -f ds.yml') or delete it first", name, strings.Join(users, ", "))
		}
		// An attached compute's credentials: without them its nodes could
		// not be stopped at detach.
		computes, err := tx.ListComputes(ctx, workspace)
		if err != nil {
			return err
		}
		for _, c := range computes {
			if c.IsAttached() && c.CredentialsSecretName() == name {
				return errorf(409, api.CodeConflict, "secret %s is the credentials of attached compute %s; detach it first ('tide compute detach %s'), which deletes the secret", name, c.Name, c.Name)
			}
		}
		return tx.DeleteObject(ctx, kindSecret, secretKey(workspace, name))
	})
	if store.IsNotFound(err) {
		return notFound("secret", name, "list secrets with 'tide secret list'")
	}
	return err
}

// SecretRefs returns the secret names a job's environment variables refer
// to, sorted.
func SecretRefs(env map[string]string) []string {
	var names []string
	for _, v := range env {
		for _, m := range secretRefRE.FindAllStringSubmatch(v, -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return names
}

// checkSecretRefs refuses a job whose environment names a secret the
// workspace does not have, naming every missing one.
func checkSecretRefs(ctx context.Context, tx store.Tx, workspace string, env map[string]string) error {
	var missing []api.FieldProblem
	for _, name := range SecretRefs(env) {
		if _, err := tx.GetObject(ctx, kindSecret, secretKey(workspace, name)); store.IsNotFound(err) {
			missing = append(missing, api.FieldProblem{Field: "environment_variables",
				Message: fmt.Sprintf("secret %q does not exist in workspace %s; set it with 'tide secret set %s'", name, workspace, name)})
		} else if err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &Error{Status: 400, Code: api.CodeValidation, Field: "environment_variables", Msg: missing[0].Message, Fields: missing}
}

// ResolveSecrets returns env with every ${{secrets.NAME}} replaced by the
// secret's value, and the values it put in (for the agent to mask in the
// job's log). A secret deleted since submission fails the attempt.
func ResolveSecrets(ctx context.Context, tx store.Tx, box *SecretBox, workspace string, env map[string]string) (map[string]string, []string, error) {
	names := SecretRefs(env)
	if len(names) == 0 {
		return env, nil, nil
	}
	values := map[string]string{}
	var masked []string
	for _, name := range names {
		v, err := openWorkspaceSecret(ctx, tx, box, workspace, name)
		if err != nil {
			return nil, nil, err
		}
		values[name] = v
		masked = append(masked, v)
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = secretRefRE.ReplaceAllStringFunc(v, func(m string) string {
			return values[secretRefRE.FindStringSubmatch(m)[1]]
		})
	}
	return out, masked, nil
}

// openWorkspaceSecret returns the value of a workspace secret.
func openWorkspaceSecret(ctx context.Context, tx store.Tx, box *SecretBox, workspace, name string) (string, error) {
	sec, err := getObject[storedSecret](ctx, tx, kindSecret, secretKey(workspace, name))
	if store.IsNotFound(err) {
		return "", fmt.Errorf("secret %q of workspace %s no longer exists; set it again with 'tide secret set %s'", name, workspace, name)
	}
	if err != nil {
		return "", err
	}
	return sec.open(box)
}

// JobSecrets is what an attempt is given beyond its job document: its
// environment with secrets filled in, the values to mask in its log, and
// its identity token.
type JobSecrets struct {
	Env           map[string]string
	Masks         []string
	IdentityToken string
}

// LoadJobSecrets reads what an attempt of j is given, opening secrets
// with box; mint makes its identity token (nil: none) from j and c, the
// job's compute (nil when it is gone). The caller passes the compute it
// holds: the controller's turn has read it already, and reading it again
// for every assignment was a statement of each job's dispatch.
func LoadJobSecrets(ctx context.Context, tx store.Tx, box *SecretBox, j *api.Job, c *api.Compute, mint func(*api.Job, *api.Compute) string) (JobSecrets, error) {
	env, masks, err := ResolveSecrets(ctx, tx, box, j.Workspace, j.EnvironmentVariables)
	if err != nil {
		return JobSecrets{}, err
	}
	out := JobSecrets{Env: env, Masks: masks}
	if mint != nil {
		out.IdentityToken = mint(j, c)
	}
	return out, nil
}

// Apply puts the secrets into an assignment.
func (js JobSecrets) Apply(a *api.Assignment) {
	if js.Env != nil {
		a.Env = js.Env
	}
	a.Masks = js.Masks
	a.IdentityToken = js.IdentityToken
}
