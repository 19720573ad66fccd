package service

import (
	"fmt"
	"strings"

	"github.com/tideml/tide/api"
)

// hostFit checks c's size against the host its location's nodes share (a
// local location runs every node on the server's machine). Memory and GPUs
// a node would need beyond the host's cannot be honoured (jobs would be
// killed for memory or find no device): such a size is refused naming what
// is missing, or, on a location with `oversubscribe: true`, accepted with
// the returned warning. vCPUs beyond the host's only slow jobs down (the
// CPUs are time-shared, as nodes on one host share them anyway): they are
// accepted with a warning.
func (s *Service) hostFit(c *api.Compute) (warning string, err error) {
	if s.HostCapacity == nil {
		return "", nil
	}
	host, ok := s.HostCapacity(c.Location)
	if !ok {
		return "", nil
	}
	size, ok := s.Catalog.Lookup(c.Size)
	if !ok {
		return "", nil // ValidateCompute named the unknown size
	}
	var short []string
	if host.MemoryGB > 0 && size.MemoryGB > host.MemoryGB {
		short = append(short, fmt.Sprintf("%g GB of memory (the host has %.1f GB)", size.MemoryGB, host.MemoryGB))
	}
	if size.GPUs > host.GPUs {
		short = append(short, fmt.Sprintf("%d GPUs (the host has %d)", size.GPUs, host.GPUs))
	}
	where := fmt.Sprintf("every node of location %s runs on this host", c.Location)
	if len(short) == 0 {
		if size.VCPUs > host.VCPUs {
			return fmt.Sprintf("size %s: a node has %d vCPUs and the host %d; %s, so its jobs share the host's CPUs and run slower than on Azure",
				c.Size, size.VCPUs, host.VCPUs, where), nil
		}
		return "", nil
	}
	what := fmt.Sprintf("size %s: a node needs %s, and %s", c.Size, strings.Join(short, " and "), where)
	if s.Config.Oversubscribes(c.Location) {
		return what + "; accepted because the location sets oversubscribe: true (jobs that use it all will fail)", nil
	}
	e := errorf(400, api.CodeValidation, "%s; pick a size that fits ('tide compute list-sizes'), or set oversubscribe: true on location %s in the server config to accept it anyway", what, c.Location)
	e.Field = "size"
	e.Fields = []api.FieldProblem{{Field: "size", Message: e.Msg}}
	return "", e
}
