package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
)

// Unlimited as a quota limit means no limit.
const Unlimited = -1

// Quotas are vCPU limits per location, VM family and tier, as an Azure
// subscription has them. A compute cluster reserves max_instances × vCPUs of
// its size's family in its tier and location for as long as it exists, even
// with no node running ("unprovisioned nodes contribute to quota usage", as
// Azure ML puts it), so a team cannot create clusters that together could
// outgrow what the administrator allows.
//
// A limit is resolved from the most specific setting:
// locations[L].families[F], then locations[L], then families[F], then the
// top-level default. Location settings thus replace global ones for that
// location. Family and location names match without regard to case.
//
// Start from DefaultQuotas and decode the server configuration over it, so
// fields the configuration leaves out keep their defaults.
type Quotas struct {
	// Dedicated is the default dedicated vCPU limit of every family in every
	// location; Unlimited (-1) means no limit.
	Dedicated int `yaml:"dedicated" json:"dedicated"`
	// LowPriority is the default low-priority vCPU limit of every family in
	// every location; Unlimited (-1) means no limit.
	LowPriority int `yaml:"low_priority" json:"low_priority"`
	// Families overrides the defaults for single VM families (keys are Azure
	// quota family names such as standardNCSv3Family), in every location.
	Families map[string]FamilyQuota `yaml:"families,omitempty" json:"families,omitempty"`
	// Locations overrides limits for one location (keys are location names).
	Locations map[string]LocationQuotas `yaml:"locations,omitempty" json:"locations,omitempty"`
}

// FamilyQuota overrides the limits of one VM family. A nil field keeps the
// limit of the next less specific setting.
type FamilyQuota struct {
	// Dedicated is the family's dedicated vCPU limit.
	Dedicated *int `yaml:"dedicated,omitempty" json:"dedicated,omitempty"`
	// LowPriority is the family's low-priority vCPU limit.
	LowPriority *int `yaml:"low_priority,omitempty" json:"low_priority,omitempty"`
}

// LocationQuotas overrides limits in one location. A nil field keeps the
// global setting.
type LocationQuotas struct {
	// Dedicated is the default dedicated vCPU limit of every family here.
	Dedicated *int `yaml:"dedicated,omitempty" json:"dedicated,omitempty"`
	// LowPriority is the default low-priority vCPU limit of every family here.
	LowPriority *int `yaml:"low_priority,omitempty" json:"low_priority,omitempty"`
	// Families overrides single families here.
	Families map[string]FamilyQuota `yaml:"families,omitempty" json:"families,omitempty"`
}

// Default per-family limits. Azure gives a new subscription a few dozen vCPUs
// per family; tide runs on hardware its users own, and clusters reserve the
// vCPUs of the sizes they name (a 4-node Standard_NC24s_v3 cluster reserves
// 96), so the default is generous and administrators lower it where it
// matters.
const (
	DefaultDedicatedLimit   = 1000
	DefaultLowPriorityLimit = 1000
)

// DefaultQuotas returns the quotas that apply when the server configuration
// sets none.
func DefaultQuotas() Quotas {
	return Quotas{Dedicated: DefaultDedicatedLimit, LowPriority: DefaultLowPriorityLimit}
}

// Validate reports the first limit below Unlimited, naming its config path.
func (q Quotas) Validate() error {
	check := func(path string, v int) error {
		if v < Unlimited {
			return fmt.Errorf("quotas.%s: must be >= 0, or -1 for no limit (got %d)", path, v)
		}
		return nil
	}
	checkPtr := func(path string, v *int) error {
		if v == nil {
			return nil
		}
		return check(path, *v)
	}
	checkFamilies := func(prefix string, fams map[string]FamilyQuota) error {
		for _, name := range sortedKeys(fams) {
			f := fams[name]
			if err := checkPtr(prefix+"families."+name+".dedicated", f.Dedicated); err != nil {
				return err
			}
			if err := checkPtr(prefix+"families."+name+".low_priority", f.LowPriority); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check("dedicated", q.Dedicated); err != nil {
		return err
	}
	if err := check("low_priority", q.LowPriority); err != nil {
		return err
	}
	if err := checkFamilies("", q.Families); err != nil {
		return err
	}
	for _, name := range sortedKeys(q.Locations) {
		l := q.Locations[name]
		p := "locations." + name + "."
		if err := checkPtr(p+"dedicated", l.Dedicated); err != nil {
			return err
		}
		if err := checkPtr(p+"low_priority", l.LowPriority); err != nil {
			return err
		}
		if err := checkFamilies(p, l.Families); err != nil {
			return err
		}
	}
	return nil
}

// Limit returns the vCPU limit of family in tier (api.TierDedicated or
// api.TierLowPriority; empty means dedicated) at location, or Unlimited.
func (q Quotas) Limit(location, family, tier string) int {
	low := tier == api.TierLowPriority
	pick := func(f FamilyQuota) *int {
		if low {
			return f.LowPriority
		}
		return f.Dedicated
	}
	if l, ok := lookupFold(q.Locations, location); ok {
		if f, ok := lookupFold(l.Families, family); ok && pick(f) != nil {
			return *pick(f)
		}
		v := l.Dedicated
		if low {
			v = l.LowPriority
		}
		if v != nil {
			return *v
		}
	}
	if f, ok := lookupFold(q.Families, family); ok && pick(f) != nil {
		return *pick(f)
	}
	if low {
		return q.LowPriority
	}
	return q.Dedicated
}

// configPath names the setting an administrator raises to allow more of
// family in tier at location: the one Limit resolved from, or the global
// family override when the limit comes from a default.
func (q Quotas) configPath(location, family, tier string) string {
	t := "dedicated"
	if tier == api.TierLowPriority {
		t = "low_priority"
	}
	if l, ok := lookupFold(q.Locations, location); ok {
		if f, ok := lookupFold(l.Families, family); ok && ((t == "dedicated" && f.Dedicated != nil) || (t == "low_priority" && f.LowPriority != nil)) {
			return "quotas.locations." + location + ".families." + family + "." + t
		}
		if (t == "dedicated" && l.Dedicated != nil) || (t == "low_priority" && l.LowPriority != nil) {
			return "quotas.locations." + location + ".families." + family + "." + t
		}
	}
	return "quotas.families." + family + "." + t
}

func lookupFold[V any](m map[string]V, key string) (V, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	var zero V
	return zero, false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// reservation is what one compute holds against a quota.
type reservation struct {
	location, family, tier string
	vcpus                  int
}

func (r reservation) sameBucket(o reservation) bool {
	return strings.EqualFold(r.location, o.location) && strings.EqualFold(r.family, o.family) && r.tier == o.tier
}

// reserve returns c's reservation; ok is false when c's size is not in cat
// (such a compute cannot have been accepted, so it holds nothing).
func reserve(c api.Compute, cat *Catalog) (reservation, bool) {
	size, ok := cat.Lookup(c.Size)
	if !ok {
		return reservation{}, false
	}
	tier := c.Tier
	if tier != api.TierLowPriority {
		tier = api.TierDedicated
	}
	n := max(c.MaxInstances, 0)
	return reservation{location: c.Location, family: size.Family, tier: tier, vcpus: n * size.VCPUs}, true
}

// UsageUnit is the unit of every api.Usage, as Azure reports it.
const UsageUnit = "Count"

// Usage returns, for every location (those given and those computes use),
// every family of cat and both tiers, the vCPUs that computes reserve and the
// limit. Computes of all workspaces count, since a quota belongs to a
// location as Azure's belongs to a subscription's region. The result is
// sorted by location, family and tier.
func Usage(computes []api.Compute, cat *Catalog, q Quotas, locations []string) []api.Usage {
	locs := slices.Clone(locations)
	for _, c := range computes {
		// An attached compute's location is its own and holds no quota
		// (nor do the Pods jobs get on an attached cluster).
		if _, _, ok := api.ParseAttachedLocation(c.Location); ok {
			continue
		}
		if c.Location != "" && !slices.ContainsFunc(locs, func(l string) bool { return strings.EqualFold(l, c.Location) }) {
			locs = append(locs, c.Location)
		}
	}
	slices.SortFunc(locs, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	locs = slices.CompactFunc(locs, strings.EqualFold)

	var out []api.Usage
	for _, loc := range locs {
		for _, fam := range cat.Families() {
			for _, tier := range []string{api.TierDedicated, api.TierLowPriority} {
				bucket := reservation{location: loc, family: fam, tier: tier}
				used := 0
				for _, c := range computes {
					if r, ok := reserve(c, cat); ok && r.sameBucket(bucket) {
						used += r.vcpus
					}
				}
				out = append(out, api.Usage{
					Location: loc, Family: fam, Tier: tier,
					CurrentValue: used, Limit: q.Limit(loc, fam, tier), Unit: UsageUnit,
				})
			}
		}
	}
	return out
}

// Check returns a *QuotaError when putting candidate would take its family's
// reserved vCPUs in its tier and location above the limit. A compute in
// existing with the candidate's workspace and name is the one being updated:
// it is replaced, not counted twice. An update that does not grow its own
// reservation is allowed even when the bucket is over a limit an
// administrator has since lowered, so users can always shrink. candidate's
// location must already be defaulted.
func Check(existing []api.Compute, candidate api.Compute, cat *Catalog, q Quotas) error {
	want, ok := reserve(candidate, cat)
	if !ok {
		return fmt.Errorf("size %s: unknown VM size; run 'tide compute list-sizes'", candidate.Size)
	}
	inUse, previous, updating := 0, 0, false
	for _, c := range existing {
		r, ok := reserve(c, cat)
		if c.Workspace == candidate.Workspace && c.Name == candidate.Name {
			if ok && r.sameBucket(want) {
				previous, updating = r.vcpus, true
			}
			continue
		}
		if ok && r.sameBucket(want) {
			inUse += r.vcpus
		}
	}
	limit := q.Limit(want.location, want.family, want.tier)
	if limit == Unlimited || inUse+want.vcpus <= limit || (updating && want.vcpus <= previous) {
		return nil
	}
	return &QuotaError{
		Location: want.location, Family: want.family, Tier: want.tier,
		Requested: want.vcpus, InUse: inUse, Limit: limit,
		ConfigPath: q.configPath(want.location, want.family, want.tier),
	}
}

// QuotaError says that a compute would reserve more vCPUs than its family's
// quota allows.
type QuotaError struct {
	Location  string // location of the quota
	Family    string // VM family, e.g. standardDSv2Family
	Tier      string // api.TierDedicated or api.TierLowPriority
	Requested int    // vCPUs the compute would reserve (max_instances × vCPUs)
	InUse     int    // vCPUs other computes reserve in the same bucket
	Limit     int    // the limit
	// ConfigPath is the server configuration setting that raises the limit.
	ConfigPath string
}

// Error names the quota, the numbers and what to do.
func (e *QuotaError) Error() string {
	path := e.ConfigPath
	if path == "" {
		path = "the quotas"
	}
	return fmt.Sprintf("quota exceeded: %s %s vCPUs in location %s: this compute needs %d (max_instances × vCPUs), %d in use by other computes, limit %d; lower max_instances, delete a compute, or raise %s in the server config",
		e.Family, e.Tier, e.Location, e.Requested, e.InUse, e.Limit, path)
}

// IsQuotaExceeded reports whether err is or wraps a *QuotaError.
func IsQuotaExceeded(err error) bool {
	var qe *QuotaError
	return errors.As(err, &qe)
}
