package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// Object kinds in the store.
const (
	kindUser   = "user"
	kindRole   = "role"
	kindSecret = "secret"
)

// BootstrapUser is the owner the server creates on its first start; the
// admin token it writes to the CLI configuration signs it in.
const BootstrapUser = "admin"

var principalNameRE = regexp.MustCompile(`^[a-z][a-z0-9._-]{0,62}$`)

type userKey struct{}

// WithUser returns a context that attributes what is done with it to user.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserOf returns the user a context acts for ("" when none).
func UserOf(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// HashToken is how token secrets are stored: only their SHA-256.
func HashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// NewTokenSecret returns a fresh random token secret.
func NewTokenSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "tide_" + hex.EncodeToString(b)
}

func getObject[T any](ctx context.Context, tx store.Tx, kind, key string) (*T, error) {
	b, err := tx.GetObject(ctx, kind, key)
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", kind, key, err)
	}
	return &v, nil
}

func putObject(ctx context.Context, tx store.Tx, kind, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", kind, key, err)
	}
	return tx.PutObject(ctx, kind, key, b)
}

func listObjects[T any](ctx context.Context, tx store.Tx, kind, prefix string) ([]T, error) {
	docs, err := tx.ListObjects(ctx, kind, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(docs))
	for _, b := range docs {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", kind, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// EnsureBootstrapUser creates the bootstrap owner if it is missing (a data
// dir from before users existed), in the caller's transaction.
func EnsureBootstrapUser(ctx context.Context, tx store.Tx, now time.Time) error {
	if _, err := tx.GetObject(ctx, kindUser, BootstrapUser); err == nil || !store.IsNotFound(err) {
		return err
	}
	return putObject(ctx, tx, kindUser, BootstrapUser, api.User{Name: BootstrapUser, Kind: api.PrincipalUser, Admin: true,
		Description: "the bootstrap owner, created on the server's first start", CreatedOn: now})
}

// MintToken stores a new token for user and returns it with its secret,
// in the caller's transaction.
func MintToken(ctx context.Context, tx store.Tx, user, name string, expires, now time.Time) (api.Token, error) {
	secret := NewTokenSecret()
	hash := HashToken(secret)
	t := store.Token{Hash: hash, ID: hash[:12], Name: name, User: user, Created: now, Expires: expires}
	if err := tx.PutToken(ctx, &t); err != nil {
		return api.Token{}, err
	}
	out := tokenView(t)
	out.Secret = secret
	return out, nil
}

func tokenView(t store.Token) api.Token {
	user := t.User
	if user == "" {
		user = BootstrapUser
	}
	id := t.ID
	if id == "" && len(t.Hash) >= 12 {
		id = t.Hash[:12]
	}
	return api.Token{ID: id, Name: t.Name, User: user, CreatedOn: t.Created, ExpiresOn: t.Expires, LastUsed: t.LastUsed}
}

// TokenUser returns the user a stored token signs in.
func TokenUser(t *store.Token) string {
	if t.User == "" {
		return BootstrapUser
	}
	return t.User
}

// User returns one user or identity.
func (s *Service) User(ctx context.Context, name string) (*api.User, error) {
	var u *api.User
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		u, err = getObject[api.User](ctx, tx, kindUser, name)
		return err
	})
	if store.IsNotFound(err) {
		return nil, notFound("user", name, "list users with 'tide user list'")
	}
	return u, err
}

// Users lists users and identities; kind filters ("" for both).
func (s *Service) Users(ctx context.Context, kind string) ([]api.User, error) {
	var out []api.User
	err := s.Store.View(ctx, func(tx store.Tx) error {
		all, err := listObjects[api.User](ctx, tx, kindUser, "")
		for _, u := range all {
			if kind == "" || u.Kind == kind {
				out = append(out, u)
			}
		}
		return err
	})
	return out, err
}

// CreateUser creates a user (or an identity) and, for a user, its first
// token, returned with its secret.
func (s *Service) CreateUser(ctx context.Context, u api.User) (api.User, *api.Token, error) {
	if !principalNameRE.MatchString(u.Name) {
		return api.User{}, nil, &Error{Status: 400, Code: api.CodeValidation, Field: "name",
			Msg: fmt.Sprintf("name %q: use 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter", u.Name)}
	}
	if u.Kind == "" {
		u.Kind = api.PrincipalUser
	}
	if u.Kind != api.PrincipalUser && u.Kind != api.PrincipalIdentity {
		return api.User{}, nil, &Error{Status: 400, Code: api.CodeValidation, Field: "kind", Msg: fmt.Sprintf("kind %q: use user or identity", u.Kind)}
	}
	if u.Kind == api.PrincipalIdentity && u.Admin {
		return api.User{}, nil, &Error{Status: 400, Code: api.CodeValidation, Field: "admin", Msg: "an identity cannot be a server admin; give it roles in workspaces"}
	}
	now := s.now()
	u.CreatedOn, u.CreatedBy = now, UserOf(ctx)
	var tok *api.Token
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		tok = nil
		if _, err := tx.GetObject(ctx, kindUser, u.Name); err == nil {
			return errorf(409, api.CodeConflict, "%s %q already exists", u.Kind, u.Name)
		} else if !store.IsNotFound(err) {
			return err
		}
		if err := putObject(ctx, tx, kindUser, u.Name, u); err != nil {
			return err
		}
		if u.Kind == api.PrincipalIdentity {
			return nil
		}
		t, err := MintToken(ctx, tx, u.Name, "first", time.Time{}, now)
		tok = &t
		return err
	})
	return u, tok, err
}

// DeleteUser deletes a user or identity with its tokens and role
// assignments. It refuses to remove the last Owner of a workspace.
func (s *Service) DeleteUser(ctx context.Context, name string) error {
	if name == BootstrapUser {
		return errorf(409, api.CodeConflict, "user %q is the bootstrap owner and cannot be deleted; create other admins with 'tide user create --admin'", name)
	}
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetObject(ctx, kindUser, name); store.IsNotFound(err) {
			return notFound("user", name, "list users with 'tide user list'")
		} else if err != nil {
			return err
		}
		roles, err := listObjects[api.RoleAssignment](ctx, tx, kindRole, "")
		if err != nil {
			return err
		}
		for _, ra := range roles {
			if ra.Principal != name {
				continue
			}
			if err := removeRole(ctx, tx, roles, ra); err != nil {
				return err
			}
		}
		toks, err := tx.ListTokens(ctx)
		if err != nil {
			return err
		}
		for _, t := range toks {
			if TokenUser(&t) == name {
				if err := tx.DeleteToken(ctx, t.Hash); err != nil {
					return err
				}
			}
		}
		return tx.DeleteObject(ctx, kindUser, name)
	})
}

// ParseExpiry reads a token lifetime: "30d", "12h", "90m" (Go durations
// and days). Empty is no expiry.
func ParseExpiry(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		days, err = strconv.Atoi(n)
		d = time.Duration(days) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, &Error{Status: 400, Code: api.CodeValidation, Field: "expires", Msg: fmt.Sprintf("expires %q: use a positive duration such as 30d, 12h or 90m", s)}
	}
	return d, nil
}

// CreateToken makes a token for user (the caller unless an admin names
// another user).
func (s *Service) CreateToken(ctx context.Context, req api.TokenRequest) (api.Token, error) {
	d, err := ParseExpiry(req.Expires)
	if err != nil {
		return api.Token{}, err
	}
	now := s.now()
	var exp time.Time
	if d > 0 {
		exp = now.Add(d)
	}
	var out api.Token
	err = s.Store.Update(ctx, func(tx store.Tx) error {
		u, err := getObject[api.User](ctx, tx, kindUser, req.User)
		if store.IsNotFound(err) {
			return notFound("user", req.User, "create it with 'tide user create'")
		}
		if err != nil {
			return err
		}
		if u.Kind == api.PrincipalIdentity {
			return errorf(400, api.CodeValidation, "%q is an identity: jobs act as identities with their own short-lived tokens; identities have no API tokens", u.Name)
		}
		out, err = MintToken(ctx, tx, req.User, req.Name, exp, now)
		return err
	})
	return out, err
}

// Tokens lists the tokens of user, or of everyone when user is "".
func (s *Service) Tokens(ctx context.Context, user string) ([]api.Token, error) {
	var out []api.Token
	err := s.Store.View(ctx, func(tx store.Tx) error {
		toks, err := tx.ListTokens(ctx)
		for _, t := range toks {
			if user == "" || TokenUser(&t) == user {
				out = append(out, tokenView(t))
			}
		}
		return err
	})
	slices.SortFunc(out, func(a, b api.Token) int { return a.CreatedOn.Compare(b.CreatedOn) })
	return out, err
}

// RevokeToken deletes the token with id; user, when not "", must own it.
// It returns the revoked token's hash.
func (s *Service) RevokeToken(ctx context.Context, id, user string) (string, error) {
	var hash string
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		toks, err := tx.ListTokens(ctx)
		if err != nil {
			return err
		}
		for _, t := range toks {
			if tokenView(t).ID == id && (user == "" || TokenUser(&t) == user) {
				hash = t.Hash
				return tx.DeleteToken(ctx, t.Hash)
			}
		}
		return notFound("token", id, "list your tokens with 'tide token list'")
	})
	return hash, err
}

// Audit lists audit entries, newest first.
func (s *Service) Audit(ctx context.Context, f store.AuditFilter) ([]api.AuditEntry, error) {
	var out []api.AuditEntry
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		out, err = tx.ListAudit(ctx, f)
		return err
	})
	return out, err
}
