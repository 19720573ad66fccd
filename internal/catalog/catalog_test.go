package catalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

func TestDefaultHasRequiredSizes(t *testing.T) {
	required := []string{
		"Standard_DS1_v2", "Standard_DS2_v2", "Standard_DS3_v2", "Standard_DS4_v2", "Standard_DS5_v2",
		"Standard_DS11_v2", "Standard_DS12_v2", "Standard_DS13_v2", "Standard_DS14_v2",
		"Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5", "Standard_D16s_v5", "Standard_D32s_v5",
		"Standard_E4s_v5", "Standard_E8s_v5", "Standard_E16s_v5",
		"Standard_F4s_v2", "Standard_F8s_v2", "Standard_F16s_v2", "Standard_F32s_v2",
		"Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3",
		"Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3",
		"Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4",
		"Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4",
		"Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5", "Standard_ND96isr_H100_v5",
	}
	c := Default()
	if n := len(c.Sizes()); n < 30 {
		t.Fatalf("Default has %d sizes, want >= 30", n)
	}
	for _, name := range required {
		s, ok := c.Lookup(name)
		if !ok {
			t.Errorf("Lookup(%s): missing", name)
			continue
		}
		if s.Name != name {
			t.Errorf("Lookup(%s).Name = %s, want canonical casing", name, s.Name)
		}
		if s.PricePerHour <= 0 {
			t.Errorf("%s: price_per_hour = %g, want > 0", name, s.PricePerHour)
		}
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name       string
		want       string
		wantVCPUs  int
		wantGPUs   int
		wantFamily string
		ok         bool
	}{
		{"Standard_DS3_v2", "Standard_DS3_v2", 4, 0, "standardDSv2Family", true},
		{"STANDARD_DS3_v2", "Standard_DS3_v2", 4, 0, "standardDSv2Family", true},
		{"standard_ds3_v2", "Standard_DS3_v2", 4, 0, "standardDSv2Family", true},
		{" Standard_DS3_v2 ", "Standard_DS3_v2", 4, 0, "standardDSv2Family", true},
		{"standard_nc24ads_a100_v4", "Standard_NC24ads_A100_v4", 24, 1, "standardNCADSA100v4Family", true},
		{"Standard_ND96isr_H100_v5", "Standard_ND96isr_H100_v5", 96, 8, "standardNDSH100v5Family", true},
		{"Standard_XYZ", "", 0, 0, "", false},
		{"", "", 0, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := Default().Lookup(tt.name)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if s.Name != tt.want || s.VCPUs != tt.wantVCPUs || s.GPUs != tt.wantGPUs || s.Family != tt.wantFamily {
				t.Errorf("got %+v", s)
			}
		})
	}
}

func TestSizesSortedAndCopied(t *testing.T) {
	c := Default()
	s := c.Sizes()
	for i := 1; i < len(s); i++ {
		if strings.ToLower(s[i-1].Name) >= strings.ToLower(s[i].Name) {
			t.Fatalf("not sorted: %s before %s", s[i-1].Name, s[i].Name)
		}
	}
	s[0].VCPUs = 9999
	if c.Sizes()[0].VCPUs == 9999 {
		t.Fatal("Sizes returned the catalog's own slice")
	}
}

func TestNewValidates(t *testing.T) {
	ok := api.Size{Name: "Local_4", Family: "localFamily", VCPUs: 4, MemoryGB: 8}
	tests := []struct {
		name    string
		sizes   []api.Size
		wantErr string
	}{
		{"valid", []api.Size{ok}, ""},
		{"no name", []api.Size{{Family: "f", VCPUs: 1, MemoryGB: 1}}, "name: required"},
		{"no family", []api.Size{{Name: "a", VCPUs: 1, MemoryGB: 1}}, "family: required"},
		{"zero vcpus", []api.Size{{Name: "a", Family: "f", MemoryGB: 1}}, "vcpus: must be > 0"},
		{"zero memory", []api.Size{{Name: "a", Family: "f", VCPUs: 1}}, "memory_gb: must be > 0"},
		{"gpus without type", []api.Size{{Name: "a", Family: "f", VCPUs: 1, MemoryGB: 1, GPUs: 1}}, "gpu_type: required"},
		{"negative price", []api.Size{{Name: "a", Family: "f", VCPUs: 1, MemoryGB: 1, PricePerHour: -1}}, "price_per_hour"},
		{"duplicate by case", []api.Size{ok, {Name: "LOCAL_4", Family: "f", VCPUs: 1, MemoryGB: 1}}, "defined twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.sizes)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New error = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestWithOverrides(t *testing.T) {
	base := Default()
	tests := []struct {
		name      string
		overrides []api.Size
		lookup    string
		wantName  string
		wantVCPUs int
		wantPrice float64
		wantErr   string
	}{
		{"adds a size", []api.Size{{Name: "Local_Box", Family: "localFamily", VCPUs: 16, MemoryGB: 64}}, "local_box", "Local_Box", 16, 0, ""},
		{"replaces by name without regard to case", []api.Size{{Name: "STANDARD_DS3_V2", Family: "standardDSv2Family", VCPUs: 4, MemoryGB: 14, PricePerHour: 0.5}}, "Standard_DS3_v2", "STANDARD_DS3_V2", 4, 0.5, ""},
		{"keeps others", nil, "Standard_F4s_v2", "Standard_F4s_v2", 4, 0.169, ""},
		{"rejects invalid", []api.Size{{Name: "bad", Family: "f", VCPUs: 0, MemoryGB: 1}}, "", "", 0, 0, "vcpus"},
		{"rejects duplicates", []api.Size{{Name: "x", Family: "f", VCPUs: 1, MemoryGB: 1}, {Name: "X", Family: "f", VCPUs: 1, MemoryGB: 1}}, "", "", 0, 0, "defined twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := base.WithOverrides(tt.overrides)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, ok := c.Lookup(tt.lookup)
			if !ok || s.Name != tt.wantName || s.VCPUs != tt.wantVCPUs || s.PricePerHour != tt.wantPrice {
				t.Errorf("Lookup(%s) = %+v, %v", tt.lookup, s, ok)
			}
		})
	}
	if s, _ := base.Lookup("Standard_DS3_v2"); s.Name != "Standard_DS3_v2" || s.PricePerHour != 0.293 {
		t.Errorf("WithOverrides changed the base catalog: %+v", s)
	}
}

func ptr(v int) *int { return &v }

func TestLimit(t *testing.T) {
	q := Quotas{
		Dedicated:   100,
		LowPriority: 50,
		Families:    map[string]FamilyQuota{"standardNCSv3Family": {Dedicated: ptr(24)}},
		Locations: map[string]LocationQuotas{
			"gpu-lab": {Dedicated: ptr(500), Families: map[string]FamilyQuota{"standardNDSH100v5Family": {Dedicated: ptr(96), LowPriority: ptr(0)}}},
			"small":   {LowPriority: ptr(8)},
		},
	}
	tests := []struct {
		location, family, tier string
		want                   int
	}{
		{"local", "standardDSv2Family", api.TierDedicated, 100},
		{"local", "standardDSv2Family", "", 100},
		{"local", "standardDSv2Family", api.TierLowPriority, 50},
		{"local", "standardNCSv3Family", api.TierDedicated, 24},
		{"local", "STANDARDNCSV3FAMILY", api.TierDedicated, 24},
		{"local", "standardNCSv3Family", api.TierLowPriority, 50},
		{"gpu-lab", "standardNCSv3Family", api.TierDedicated, 500},
		{"GPU-LAB", "standardNDSH100v5Family", api.TierDedicated, 96},
		{"gpu-lab", "standardNDSH100v5Family", api.TierLowPriority, 0},
		{"gpu-lab", "standardDSv2Family", api.TierLowPriority, 50},
		{"small", "standardNCSv3Family", api.TierDedicated, 24},
		{"small", "standardNCSv3Family", api.TierLowPriority, 8},
	}
	for _, tt := range tests {
		if got := q.Limit(tt.location, tt.family, tt.tier); got != tt.want {
			t.Errorf("Limit(%s, %s, %s) = %d, want %d", tt.location, tt.family, tt.tier, got, tt.want)
		}
	}
}

func TestQuotasValidate(t *testing.T) {
	if err := DefaultQuotas().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Quotas{Dedicated: 10, LowPriority: 10, Locations: map[string]LocationQuotas{"x": {Families: map[string]FamilyQuota{"f": {Dedicated: ptr(-5)}}}}}
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "quotas.locations.x.families.f.dedicated") {
		t.Fatalf("Validate = %v", err)
	}
}

func cluster(ws, name, loc, size, tier string, max int) api.Compute {
	return api.Compute{Workspace: ws, Name: name, Type: api.ComputeTypeAmlCompute, Location: loc, Size: size, Tier: tier, MaxInstances: max}
}

func TestUsage(t *testing.T) {
	computes := []api.Compute{
		cluster("ws1", "a", "local", "Standard_DS3_v2", api.TierDedicated, 2),   // 8
		cluster("ws2", "b", "local", "STANDARD_DS12_V2", api.TierDedicated, 3),  // 12, same family
		cluster("ws1", "c", "local", "Standard_DS3_v2", api.TierLowPriority, 5), // 20 low priority
		cluster("ws1", "d", "docker", "Standard_NC6s_v3", api.TierDedicated, 4), // 24
		cluster("ws1", "e", "elsewhere", "Standard_F4s_v2", "", 1),              // location not configured: still listed
		cluster("ws1", "f", "local", "Unknown_Size", api.TierDedicated, 10),     // not counted
		// An attached machine holds no quota and its location is not listed.
		{Name: "vm", Workspace: "ws1", Type: api.ComputeTypeVirtualMachine, Location: api.AttachedLocation("ws1", "vm"), MaxInstances: 1},
	}
	q := Quotas{Dedicated: 100, LowPriority: 30}
	usage := Usage(computes, Default(), q, []string{"local", "docker"})
	get := func(loc, fam, tier string) (api.Usage, bool) {
		for _, u := range usage {
			if u.Location == loc && u.Family == fam && u.Tier == tier {
				return u, true
			}
		}
		return api.Usage{}, false
	}
	tests := []struct {
		loc, fam, tier string
		current, limit int
	}{
		{"local", "standardDSv2Family", api.TierDedicated, 20, 100},
		{"local", "standardDSv2Family", api.TierLowPriority, 20, 30},
		{"local", "standardNCSv3Family", api.TierDedicated, 0, 100},
		{"docker", "standardNCSv3Family", api.TierDedicated, 24, 100},
		{"docker", "standardDSv2Family", api.TierDedicated, 0, 100},
		{"elsewhere", "standardFSv2Family", api.TierDedicated, 4, 100},
	}
	for _, tt := range tests {
		u, ok := get(tt.loc, tt.fam, tt.tier)
		if !ok {
			t.Errorf("no usage row for %s/%s/%s", tt.loc, tt.fam, tt.tier)
			continue
		}
		if u.CurrentValue != tt.current || u.Limit != tt.limit || u.Unit != UsageUnit {
			t.Errorf("%s/%s/%s = %+v, want current %d limit %d", tt.loc, tt.fam, tt.tier, u, tt.current, tt.limit)
		}
	}
	if want := 3 * len(Default().Families()) * 2; len(usage) != want {
		t.Errorf("len(usage) = %d, want %d (3 locations × families × 2 tiers)", len(usage), want)
	}
	for i := 1; i < len(usage); i++ {
		a, b := usage[i-1], usage[i]
		if a.Location > b.Location {
			t.Fatalf("usage not sorted by location: %s before %s", a.Location, b.Location)
		}
	}
}

func TestCheck(t *testing.T) {
	q := Quotas{Dedicated: 20, LowPriority: 8, Families: map[string]FamilyQuota{"standardNCSv3Family": {Dedicated: ptr(Unlimited)}}}
	existing := []api.Compute{
		cluster("ws1", "a", "local", "Standard_DS3_v2", api.TierDedicated, 2),  // 8
		cluster("ws2", "b", "local", "Standard_DS3_v2", api.TierDedicated, 2),  // 8, other workspace: counts
		cluster("ws1", "c", "docker", "Standard_DS3_v2", api.TierDedicated, 5), // other location: does not count
	}
	tests := []struct {
		name      string
		existing  []api.Compute
		candidate api.Compute
		wantErr   *QuotaError
		wantOther string
	}{
		{"fits", existing, cluster("ws1", "new", "local", "Standard_DS1_v2", api.TierDedicated, 4), nil, ""},
		{"exactly at limit", existing, cluster("ws1", "new", "local", "Standard_DS3_v2", api.TierDedicated, 1), nil, ""},
		{"exceeds", existing, cluster("ws1", "new", "local", "Standard_DS3_v2", api.TierDedicated, 2),
			&QuotaError{Location: "local", Family: "standardDSv2Family", Tier: api.TierDedicated, Requested: 8, InUse: 16, Limit: 20}, ""},
		{"update does not double count", existing, cluster("ws1", "a", "local", "Standard_DS3_v2", api.TierDedicated, 3), nil, ""},
		{"update that grows too much", existing, cluster("ws1", "a", "local", "Standard_DS3_v2", api.TierDedicated, 4),
			&QuotaError{Location: "local", Family: "standardDSv2Family", Tier: api.TierDedicated, Requested: 16, InUse: 8, Limit: 20}, ""},
		{"same name other workspace is another compute", existing, cluster("ws3", "a", "local", "Standard_DS3_v2", api.TierDedicated, 2),
			&QuotaError{Location: "local", Family: "standardDSv2Family", Tier: api.TierDedicated, Requested: 8, InUse: 16, Limit: 20}, ""},
		{"low priority has its own limit", existing, cluster("ws1", "lp", "local", "Standard_DS3_v2", api.TierLowPriority, 3),
			&QuotaError{Location: "local", Family: "standardDSv2Family", Tier: api.TierLowPriority, Requested: 12, InUse: 0, Limit: 8}, ""},
		{"unlimited family", existing, cluster("ws1", "gpu", "local", "Standard_NC24s_v3", api.TierDedicated, 100), nil, ""},
		{"shrinking is allowed over a lowered quota", []api.Compute{
			cluster("ws1", "big", "local", "Standard_DS5_v2", api.TierDedicated, 4), // 64 > 20
		}, cluster("ws1", "big", "local", "Standard_DS5_v2", api.TierDedicated, 3), nil, ""},
		{"unknown size", existing, cluster("ws1", "x", "local", "Standard_XYZ", "", 1), nil, "unknown VM size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.existing, tt.candidate, Default(), q)
			switch {
			case tt.wantOther != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantOther) || IsQuotaExceeded(err) {
					t.Fatalf("Check = %v, want error containing %q", err, tt.wantOther)
				}
			case tt.wantErr == nil:
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
			default:
				var qe *QuotaError
				if !errors.As(err, &qe) {
					t.Fatalf("Check = %v, want *QuotaError", err)
				}
				got := *qe
				got.ConfigPath = ""
				if got != *tt.wantErr {
					t.Errorf("QuotaError = %+v, want %+v", got, *tt.wantErr)
				}
				if !IsQuotaExceeded(err) {
					t.Error("IsQuotaExceeded = false")
				}
			}
		})
	}
}

func TestQuotaErrorMessage(t *testing.T) {
	q := Quotas{Dedicated: 10, LowPriority: 10}
	err := Check(nil, cluster("ws", "gpu", "local", "Standard_NC6s_v3", api.TierDedicated, 2), Default(), q)
	want := "quota exceeded: standardNCSv3Family dedicated vCPUs in location local: this compute needs 12 (max_instances × vCPUs), 0 in use by other computes, limit 10; lower max_instances, delete a compute, or raise quotas.families.standardNCSv3Family.dedicated in the server config"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	q.Locations = map[string]LocationQuotas{"local": {Dedicated: ptr(10)}}
	err = Check(nil, cluster("ws", "gpu", "local", "Standard_NC6s_v3", api.TierDedicated, 2), Default(), q)
	if err == nil || !strings.Contains(err.Error(), "raise quotas.locations.local.families.standardNCSv3Family.dedicated") {
		t.Fatalf("got %v", err)
	}
}
