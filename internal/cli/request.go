package cli

import (
	"context"

	"github.com/tideml/tide/api"
)

// request runs fn with a client and a context bounded by requestTimeout:
// the shape of every command that makes one short call to the server.
func (r *run) request(ctx context.Context, fn func(ctx context.Context, cl *api.Client) error) error {
	cl, err := r.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return fn(ctx, cl)
}
