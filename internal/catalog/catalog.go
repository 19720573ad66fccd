// Package catalog knows the VM sizes tide offers (vCPUs, memory, GPUs, quota
// family, indicative price) and Azure-style quotas: vCPU limits per VM family,
// tier and location, against which every compute cluster reserves
// max_instances × vCPUs of its size.
package catalog

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

//go:embed sizes.yaml
var sizesYAML []byte

// Catalog is an immutable set of VM sizes, looked up by name without regard
// to case (Azure ML files write STANDARD_DS3_v2 as often as Standard_DS3_v2).
type Catalog struct {
	sizes  []api.Size          // sorted by lower-case name
	byName map[string]api.Size // key: lower-case name
}

// sizeYAML mirrors api.Size with YAML tags, so api stays free of YAML.
type sizeYAML struct {
	Name               string  `yaml:"name"`
	Family             string  `yaml:"family"`
	VCPUs              int     `yaml:"vcpus"`
	MemoryGB           float64 `yaml:"memory_gb"`
	GPUs               int     `yaml:"gpus"`
	GPUType            string  `yaml:"gpu_type"`
	LowPriorityCapable bool    `yaml:"low_priority_capable"`
	PricePerHour       float64 `yaml:"price_per_hour"`
	LowPriorityPrice   float64 `yaml:"low_priority_price_per_hour"`
}

// defaultCatalog is parsed once; a broken embedded file is a build defect, so
// it panics at start-up (and in every test) rather than at first use.
var defaultCatalog = mustParseDefault()

func mustParseDefault() *Catalog {
	var doc struct {
		Sizes []sizeYAML `yaml:"sizes"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(sizesYAML)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		panic(fmt.Sprintf("catalog: parsing embedded sizes.yaml: %v", err))
	}
	sizes := make([]api.Size, len(doc.Sizes))
	for i, s := range doc.Sizes {
		sizes[i] = api.Size(s)
	}
	c, err := New(sizes)
	if err != nil {
		panic(fmt.Sprintf("catalog: embedded sizes.yaml: %v", err))
	}
	return c
}

// Default returns the compiled-in catalog of Azure VM sizes.
func Default() *Catalog { return defaultCatalog }

// New returns a catalog of sizes after checking each one: a name, a family,
// vCPUs > 0, memory > 0, GPUs >= 0 with a GPU type when GPUs > 0, prices >= 0,
// and names unique without regard to case.
func New(sizes []api.Size) (*Catalog, error) {
	c := &Catalog{byName: make(map[string]api.Size, len(sizes))}
	for i, s := range sizes {
		if err := validateSize(s); err != nil {
			return nil, fmt.Errorf("sizes[%d]: %w", i, err)
		}
		key := strings.ToLower(s.Name)
		if prev, ok := c.byName[key]; ok {
			return nil, fmt.Errorf("sizes[%d]: size %s: defined twice (also as %s); names are compared without regard to case", i, s.Name, prev.Name)
		}
		c.byName[key] = s
		c.sizes = append(c.sizes, s)
	}
	slices.SortFunc(c.sizes, func(a, b api.Size) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return c, nil
}

func validateSize(s api.Size) error {
	switch {
	case strings.TrimSpace(s.Name) == "":
		return fmt.Errorf("name: required")
	case strings.TrimSpace(s.Family) == "":
		return fmt.Errorf("size %s: family: required (the Azure quota family, e.g. standardDSv2Family)", s.Name)
	case s.VCPUs <= 0:
		return fmt.Errorf("size %s: vcpus: must be > 0 (got %d)", s.Name, s.VCPUs)
	case s.MemoryGB <= 0:
		return fmt.Errorf("size %s: memory_gb: must be > 0 (got %g)", s.Name, s.MemoryGB)
	case s.GPUs < 0:
		return fmt.Errorf("size %s: gpus: must be >= 0 (got %d)", s.Name, s.GPUs)
	case s.GPUs > 0 && s.GPUType == "":
		return fmt.Errorf("size %s: gpu_type: required when gpus > 0 (e.g. T4, V100, A100, H100)", s.Name)
	case s.GPUs == 0 && s.GPUType != "":
		return fmt.Errorf("size %s: gpu_type: set but gpus is 0", s.Name)
	case s.PricePerHour < 0:
		return fmt.Errorf("size %s: price_per_hour: must be >= 0 (got %g)", s.Name, s.PricePerHour)
	case s.LowPriorityPrice < 0:
		return fmt.Errorf("size %s: low_priority_price_per_hour: must be >= 0 (got %g)", s.Name, s.LowPriorityPrice)
	}
	return nil
}

// WithOverrides returns a new catalog with sizes added, or replacing the
// size of the same name (without regard to case; the override's spelling
// wins). Server configuration uses it to describe local machines or to
// correct prices. c is not changed.
func (c *Catalog) WithOverrides(sizes []api.Size) (*Catalog, error) {
	merged := make(map[string]api.Size, len(c.byName)+len(sizes))
	for k, s := range c.byName {
		merged[k] = s
	}
	seen := make(map[string]bool, len(sizes))
	for i, s := range sizes {
		key := strings.ToLower(s.Name)
		if seen[key] {
			return nil, fmt.Errorf("size overrides[%d]: size %s: defined twice", i, s.Name)
		}
		seen[key] = true
		if err := validateSize(s); err != nil {
			return nil, fmt.Errorf("size overrides[%d]: %w", i, err)
		}
		merged[key] = s
	}
	all := make([]api.Size, 0, len(merged))
	for _, s := range merged {
		all = append(all, s)
	}
	return New(all)
}

// Lookup returns the size called name, compared without regard to case.
func (c *Catalog) Lookup(name string) (api.Size, bool) {
	s, ok := c.byName[strings.ToLower(strings.TrimSpace(name))]
	return s, ok
}

// Sizes returns every size, sorted by name. The slice is a copy.
func (c *Catalog) Sizes() []api.Size { return slices.Clone(c.sizes) }

// Families returns the distinct quota families of the catalog's sizes, sorted
// without regard to case, in the spelling of their first size.
func (c *Catalog) Families() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range c.sizes {
		k := strings.ToLower(s.Family)
		if !seen[k] {
			seen[k] = true
			out = append(out, s.Family)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return out
}
