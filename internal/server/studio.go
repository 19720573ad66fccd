package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/tideml/tide/internal/studio"
)

// newStudio serves Studio with this server's authentication: its CSRF
// tokens are signed with the server's key (so every replica accepts them),
// and sign-in accepts exactly the tokens the API accepts from users.
func (s *Server) newStudio() *studio.Studio {
	return studio.New(s.nodeKey, s.studioSignIn)
}

// studioSignIn checks a token pasted into Studio's sign-in page the way
// the API checks a bearer token.
func (s *Server) studioSignIn(ctx context.Context, token string) error {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", "Bearer "+token)
	p, err := s.authenticate(r)
	switch {
	case errors.Is(err, errUnauthorized):
		return errors.New("this token is not valid on this server (expired, deleted, or from another server): paste a current one")
	case err != nil:
		return err
	case p.kind == "node":
		return errors.New("a node's token cannot sign in to Studio: paste a user's API token")
	}
	return nil
}
