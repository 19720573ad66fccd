package provider_test

import (
	"fmt"
	"testing"

	"github.com/tideml/tide/internal/provider"
)

func TestErrorHelpers(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("creating node n1: %w", err) }
	tests := []struct {
		err                               error
		notFound, exists, capacity, quota bool
	}{
		{err: wrap(&provider.NotFoundError{ID: "n1"}), notFound: true},
		{err: wrap(&provider.AlreadyExistsError{ID: "n1"}), exists: true},
		{err: wrap(&provider.InsufficientCapacityError{Size: "Standard_NC6", Location: "local"}), capacity: true},
		{err: wrap(&provider.QuotaExceededError{Family: "NC", Location: "eastus", Limit: 24}), quota: true},
		{err: fmt.Errorf("other")},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := provider.IsNotFound(tt.err); got != tt.notFound {
				t.Errorf("IsNotFound = %v", got)
			}
			if got := provider.IsAlreadyExists(tt.err); got != tt.exists {
				t.Errorf("IsAlreadyExists = %v", got)
			}
			if got := provider.IsInsufficientCapacity(tt.err); got != tt.capacity {
				t.Errorf("IsInsufficientCapacity = %v", got)
			}
			if got := provider.IsQuotaExceeded(tt.err); got != tt.quota {
				t.Errorf("IsQuotaExceeded = %v", got)
			}
		})
	}
}
