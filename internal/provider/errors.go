package provider

import (
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by *NotFoundError; test with errors.Is or IsNotFound.
var ErrNotFound = errors.New("not found")

// NotFoundError means the node does not exist (or no longer does).
type NotFoundError struct {
	ID string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("node %s: not found", e.ID) }

// Unwrap makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// IsNotFound reports whether err means the node does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// AlreadyExistsError means Create was called with an id that is in use.
type AlreadyExistsError struct {
	ID string
}

func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("node %s: already exists; delete it first or choose another id", e.ID)
}

// IsAlreadyExists reports whether err is an *AlreadyExistsError.
func IsAlreadyExists(err error) bool {
	var e *AlreadyExistsError
	return errors.As(err, &e)
}

// InsufficientCapacityError means the provider has no room for the node right
// now (no free host, a cloud out of stock). The controller retries later,
// possibly elsewhere.
type InsufficientCapacityError struct {
	Size     string
	Location string
	Reason   string
}

func (e *InsufficientCapacityError) Error() string {
	msg := fmt.Sprintf("size %s in location %s: insufficient capacity", e.Size, e.Location)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// IsInsufficientCapacity reports whether err is an *InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var e *InsufficientCapacityError
	return errors.As(err, &e)
}

// QuotaExceededError means the provider's account limit (a cloud vCPU quota)
// forbids the node; it will not go away by waiting.
type QuotaExceededError struct {
	Family   string
	Location string
	Limit    int
	Reason   string
}

func (e *QuotaExceededError) Error() string {
	msg := fmt.Sprintf("family %s in location %s: quota exceeded (limit %d vCPUs)", e.Family, e.Location, e.Limit)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// IsQuotaExceeded reports whether err is a *QuotaExceededError.
func IsQuotaExceeded(err error) bool {
	var e *QuotaExceededError
	return errors.As(err, &e)
}
