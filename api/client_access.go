package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// WhoAmI says who the client's token signs in.
func (c *Client) WhoAmI(ctx context.Context) (*WhoAmI, error) {
	var out WhoAmI
	if _, err := c.do(ctx, http.MethodGet, v1("whoami"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Users lists users and identities (kind: "user", "identity" or "").
func (c *Client) Users(ctx context.Context, kind string) ([]User, error) {
	q := url.Values{}
	if kind != "" {
		q.Set("kind", kind)
	}
	return list[User](ctx, c, v1("users"), q)
}

// CreateUser creates a user (with its first token) or an identity.
func (c *Client) CreateUser(ctx context.Context, u User) (*NewUser, error) {
	var out NewUser
	if _, err := c.do(ctx, http.MethodPost, v1("users"), nil, u, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteUser deletes a user or identity.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("users", name), nil, nil, nil)
	return err
}

// Tokens lists the caller's tokens (all: everyone's, for admins).
func (c *Client) Tokens(ctx context.Context, all bool) ([]Token, error) {
	q := url.Values{}
	if all {
		q.Set("all", "true")
	}
	return list[Token](ctx, c, v1("tokens"), q)
}

// CreateToken creates a token; its Secret is shown once.
func (c *Client) CreateToken(ctx context.Context, req TokenRequest) (*Token, error) {
	var out Token
	if _, err := c.do(ctx, http.MethodPost, v1("tokens"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeToken revokes a token by id.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("tokens", id), nil, nil, nil)
	return err
}

// RoleAssignments lists a workspace's role assignments, or, with ws "",
// those of every workspace the caller has a role in.
func (c *Client) RoleAssignments(ctx context.Context, ws string) ([]RoleAssignment, error) {
	if ws == "" {
		return list[RoleAssignment](ctx, c, v1("roles"), nil)
	}
	return list[RoleAssignment](ctx, c, v1("workspaces", ws, "roles"), nil)
}

// AssignRole gives a principal a role in a workspace.
func (c *Client) AssignRole(ctx context.Context, ws, principal, role string) (*RoleAssignment, error) {
	var out RoleAssignment
	if _, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "roles"), nil, RoleAssignment{Principal: principal, Role: role}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveRole takes a principal's role in a workspace away.
func (c *Client) RemoveRole(ctx context.Context, ws, principal string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "roles", principal), nil, nil, nil)
	return err
}

// Secrets lists a workspace's secrets (names only).
func (c *Client) Secrets(ctx context.Context, ws string) ([]Secret, error) {
	return list[Secret](ctx, c, v1("workspaces", ws, "secrets"), nil)
}

// SetSecret sets a workspace secret.
func (c *Client) SetSecret(ctx context.Context, ws, name, value string) (*Secret, error) {
	var out Secret
	if _, err := c.do(ctx, http.MethodPut, v1("workspaces", ws, "secrets", name), nil, Secret{Value: value}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSecret deletes a workspace secret.
func (c *Client) DeleteSecret(ctx context.Context, ws, name string) error {
	_, err := c.do(ctx, http.MethodDelete, v1("workspaces", ws, "secrets", name), nil, nil, nil)
	return err
}

// Audit lists the audit log, newest first.
func (c *Client) Audit(ctx context.Context, user, since string, limit int) ([]AuditEntry, error) {
	q := url.Values{}
	if user != "" {
		q.Set("user", user)
	}
	if since != "" {
		q.Set("since", since)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return list[AuditEntry](ctx, c, v1("audit"), q)
}

// RotateSecretKey replaces the server's secret key, sealing every
// workspace secret and datastore credential again with the new one
// (server admins).
func (c *Client) RotateSecretKey(ctx context.Context) (*SecretKeyRotation, error) {
	var out SecretKeyRotation
	if _, err := c.do(ctx, http.MethodPost, v1("secret-key", "rotate"), nil, struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
