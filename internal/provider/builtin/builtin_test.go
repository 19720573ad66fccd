package builtin_test

import (
	"strings"
	"testing"

	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/builtin"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name, wantErr string
	}{
		{name: "local"},
		{name: "fake"},
		{name: "azure", wantErr: `provider "azure": unknown provider; known: docker, fake, kubernetes, local`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := builtin.Providers().New(tt.name, nil, provider.Deps{DataDir: t.TempDir()})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || p.Name() != tt.name {
				t.Fatalf("New(%q) = %v, %v", tt.name, p, err)
			}
		})
	}
}
