package api

import (
	"context"
	"net/http"
	"strings"
)

// InstanceOperation starts, stops or restarts a compute instance (op:
// "start", "stop" or "restart"). The server answers at once (202); the
// instance's state says how far it got.
func (c *Client) InstanceOperation(ctx context.Context, ws, name, op string) (*Compute, error) {
	var out Compute
	if _, err := c.do(ctx, http.MethodPost, v1("workspaces", ws, "computes", name, strings.ToLower(op)), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
