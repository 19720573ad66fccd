package spec

import (
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

// CheckComputeUpdate reports the changes Azure ML does not allow on an
// existing compute: type, size, tier, location, ssh_settings and
// network_settings are fixed at creation. An empty location in updated means
// "unchanged" (the server defaults it). The error is an Errors.
func CheckComputeUpdate(old, updated *api.Compute) error {
	var errs collector
	fixed := func(field, from, to string) {
		errs.add(0, field, "cannot change after creation (%s -> %s); delete and recreate the compute", from, to)
	}
	if !strings.EqualFold(old.Type, updated.Type) {
		fixed("type", old.Type, updated.Type)
	}
	if !strings.EqualFold(old.Size, updated.Size) {
		fixed("size", old.Size, updated.Size)
	}
	if ot, ut := tierOrDefault(old.Tier), tierOrDefault(updated.Tier); ot != ut {
		fixed("tier", ot, ut)
	}
	if updated.Location != "" && !strings.EqualFold(old.Location, updated.Location) {
		fixed("location", old.Location, updated.Location)
	}
	if !sameSSH(old.SSHSettings, updated.SSHSettings) {
		// Secrets stay out of the message.
		errs.add(0, "ssh_settings", "cannot change after creation; delete and recreate the compute")
	}
	on, un := old.NetworkSettings, updated.NetworkSettings
	if on == nil {
		on = &api.NetworkSettings{}
	}
	if un == nil {
		un = &api.NetworkSettings{}
	}
	if *on != *un {
		errs.add(0, "network_settings", "cannot change after creation; delete and recreate the compute")
	}
	return errs.err()
}

func tierOrDefault(t string) string {
	if t = normalizeTier(t); t == "" {
		return api.TierDedicated
	}
	return t
}

func sameSSH(a, b *api.SSHSettings) bool {
	if a == nil {
		a = &api.SSHSettings{}
	}
	if b == nil {
		b = &api.SSHSettings{}
	}
	// Responses never carry the password or key: an update without them
	// keeps the stored ones.
	return a.AdminUsername == b.AdminUsername && (b.AdminPassword == "" || a.AdminPassword == b.AdminPassword) &&
		(b.SSHKeyValue == "" || a.SSHKeyValue == b.SSHKeyValue)
}

// ParseComputePatch parses the body of a PATCH on a compute: description,
// tags, min_instances, max_instances and idle_time_before_scale_down. Fields
// fixed at creation, read-only fields and unknown fields are errors. A null
// description or tags clears it. The error is an Errors.
func ParseComputePatch(file string, data []byte) (*api.ComputePatch, error) {
	d := newDecoder(file)
	root := d.parse(data, nil)
	if root == nil {
		return nil, d.err()
	}
	p := &api.ComputePatch{}
	fixed := map[string]bool{"name": true, "type": true, "size": true, "tier": true, "location": true,
		"ssh_settings": true, "network_settings": true, "identity": true,
		"ssh_public_access_enabled": true, "enable_node_public_ip": true}
	d.mapping(root, "", patchFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "$schema":
		case "description":
			s, _ := d.str(v, fp)
			p.Description = &s
		case "tags":
			m := d.strMap(v, fp)
			if m == nil {
				m = map[string]string{}
			}
			p.Tags = &m
		case "min_instances", "max_instances", "idle_time_before_scale_down":
			n, ok := d.integer(v, fp)
			if !ok {
				if isNull(v) {
					d.add(d.lines[fp], fp, "must be an integer, got null")
				}
				return true
			}
			switch key {
			case "min_instances":
				p.MinInstances = &n
			case "max_instances":
				p.MaxInstances = &n
			default:
				p.IdleTimeBeforeScaleDown = &n
			}
		default:
			switch {
			case fixed[key]:
				d.add(d.lines[fp], fp, "cannot change after creation; delete and recreate the compute")
			case computeStatusFields[key]:
				d.readOnly(v, fp)
			default:
				return false
			}
		}
		return true
	})
	if p.MinInstances != nil && *p.MinInstances < 0 {
		d.add(d.lines["min_instances"], "min_instances", "must be >= 0 (got %d)", *p.MinInstances)
	}
	if p.MaxInstances != nil && *p.MaxInstances < 0 {
		d.add(d.lines["max_instances"], "max_instances", "must be >= 0 (0 pauses the cluster; got %d)", *p.MaxInstances)
	}
	if p.MinInstances != nil && p.MaxInstances != nil && *p.MinInstances >= 0 && *p.MaxInstances >= 0 && *p.MaxInstances < *p.MinInstances {
		d.add(d.lines["max_instances"], "max_instances", "must be >= min_instances (got %d < %d)", *p.MaxInstances, *p.MinInstances)
	}
	if p.IdleTimeBeforeScaleDown != nil && *p.IdleTimeBeforeScaleDown < 0 {
		d.add(d.lines["idle_time_before_scale_down"], "idle_time_before_scale_down", "must be >= 0 seconds (got %d)", *p.IdleTimeBeforeScaleDown)
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return p, nil
}

// CheckComputeCredentials refuses a cluster whose ssh_settings hold neither
// a password nor a key once an update has kept the stored ones: the file
// may leave them out (responses never return them), so this is checked
// after the merge, not when the file is parsed.
func CheckComputeCredentials(c *api.Compute) error {
	var errs collector
	if s := c.SSHSettings; s != nil && !c.IsInstance() && s.AdminPassword == "" && s.SSHKeyValue == "" {
		errs.add(0, "ssh_settings", "set admin_password or ssh_key_value")
	}
	return errs.err()
}
