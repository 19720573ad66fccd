// Package spec parses and validates the Azure ML YAML files tide reads
// (compute clusters and command jobs), and the JSON request bodies the server
// receives, which go through the same parser. It applies Azure's defaults and
// reports every problem at once, each with its file, line and field path, in
// words that say what to do.
//
// Parsing (Parse*) needs nothing but the document; validation against the
// server's VM size catalog and locations (ValidateCompute) is separate so
// that the CLI can check a file offline and the server can check again with
// its configuration.
package spec

import (
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
)

// Compute defaults, from Azure ML's amlCompute YAML reference.
const (
	DefaultSize                    = "Standard_DS3_v2"
	DefaultMinInstances            = 0
	DefaultMaxInstances            = 1
	DefaultIdleTimeBeforeScaleDown = 120
)

// computeTypes are the compute types of Azure ML's YAML files that tide
// recognizes but does not run yet.
var unsupportedComputeTypes = []string{"synapsespark", "attachedcompute", "serverless"}

// supportedTypes is how errors list the compute types tide runs.
const supportedTypes = "tide supports type: amlcompute, computeinstance, virtualmachine and kubernetes"

var computeFields = []string{
	"$schema", "name", "type", "description", "tags", "location", "size", "tier",
	"min_instances", "max_instances", "idle_time_before_scale_down",
	"ssh_public_access_enabled", "ssh_settings", "network_settings", "identity", "enable_node_public_ip",
	"tide",
}

// computeStatusFields are set by the server (api.Compute's status block and
// Azure's own read-only fields).
var computeStatusFields = map[string]bool{
	"id": true, "workspace": true, "provisioning_state": true, "allocation_state": true,
	"current_node_count": true, "target_node_count": true, "node_state_counts": true,
	"created_on": true, "modified_on": true, "errors": true, "etag": true,
	"provisioning_errors": true, "serverless_job": true, "cost": true,
}

// ParseCompute parses a compute file (YAML or JSON). sets are "--set
// path=value" overrides (dotted paths such as max_instances=3 or
// tags.team=ml) applied to the document before decoding, with values typed
// as YAML scalars. The result has Azure's defaults: size Standard_DS3_v2,
// tier dedicated, min_instances 0, max_instances 1,
// idle_time_before_scale_down 120. Location stays empty for the server to
// default, and name may be empty when the server takes it from the URL. The
// error is an Errors.
func ParseCompute(file string, data []byte, sets []string) (*api.Compute, error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, d.err()
	}
	c := &api.Compute{}
	if !d.computeType(root, c) {
		return nil, d.err()
	}
	if c.Type == api.ComputeTypeInstance || c.Type == api.ComputeTypeVirtualMachine || c.Type == api.ComputeTypeKubernetes {
		switch c.Type {
		case api.ComputeTypeInstance:
			d.parseInstance(root, c)
		case api.ComputeTypeVirtualMachine:
			d.parseVirtualMachine(root, c)
		default:
			d.parseKubernetes(root, c)
		}
		if len(d.errs) == 0 {
			checkCompute(c, false, func(field, format string, args ...any) {
				d.add(d.lineFor(field), field, format, args...)
			})
		}
		if err := d.err(); err != nil {
			return nil, err
		}
		return c, nil
	}
	d.mapping(root, "", computeFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonComputeField(c, key, v, fp) {
			return true
		}
		switch key {
		case "location":
			c.Location, _ = d.str(v, fp)
		case "size":
			c.Size, _ = d.str(v, fp)
		case "tier":
			if s, ok := d.str(v, fp); ok {
				c.Tier = normalizeTier(s)
			}
		case "min_instances":
			c.MinInstances, _ = d.integer(v, fp)
		case "max_instances":
			if n, ok := d.integer(v, fp); ok {
				c.MaxInstances = n
			} else {
				c.MaxInstances = DefaultMaxInstances
			}
		case "idle_time_before_scale_down":
			if n, ok := d.integer(v, fp); ok {
				c.IdleTimeBeforeScaleDown = n
			} else {
				c.IdleTimeBeforeScaleDown = DefaultIdleTimeBeforeScaleDown
			}
		case "ssh_public_access_enabled":
			if b, ok := d.boolean(v, fp); ok {
				c.SSHPublicAccessEnabled = &b
			}
		case "enable_node_public_ip":
			if b, ok := d.boolean(v, fp); ok {
				c.EnableNodePublicIP = &b
				if b {
					// tide's nodes have no public address: SSH and Jupyter
					// reach them through the tide server (false is what
					// tide always does).
					d.add(resolve(v).Line, fp, "true is not supported yet: tide gives nodes no public IP (SSH and Jupyter reach them through the server); remove it or set false")
				}
			}
		case "ssh_settings":
			c.SSHSettings = d.sshSettings(v, fp)
		case "network_settings":
			c.NetworkSettings = d.networkSettings(v, fp)
		case "identity":
			c.Identity = d.identity(v, fp)
		case "tide":
			c.Tide = d.computeExtensions(v, fp)
		default:
			if computeStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if _, ok := d.lines["max_instances"]; !ok {
		c.MaxInstances = DefaultMaxInstances
	}
	if _, ok := d.lines["idle_time_before_scale_down"]; !ok {
		c.IdleTimeBeforeScaleDown = DefaultIdleTimeBeforeScaleDown
	}
	if c.Size == "" {
		c.Size = DefaultSize
	}
	if c.Tier == "" {
		c.Tier = api.TierDedicated
	}
	if len(d.errs) == 0 {
		checkCompute(c, false, func(field, format string, args ...any) {
			d.add(d.lineFor(field), field, format, args...)
		})
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// commonComputeField reads the fields every compute type has ($schema,
// type, name, description, tags); it reports false for the others.
func (d *decoder) commonComputeField(c *api.Compute, key string, v *yaml.Node, fp string) bool {
	switch key {
	case "$schema", "type":
	case "name":
		c.Name, _ = d.str(v, fp)
	case "description":
		c.Description, _ = d.str(v, fp)
	case "tags":
		c.Tags = d.strMap(v, fp)
	default:
		return false
	}
	return true
}

// lineFor finds the line of field or, failing that, of its nearest parent.
func (d *decoder) lineFor(field string) int {
	for f := field; f != ""; {
		if l, ok := d.lines[f]; ok {
			return l
		}
		i := strings.LastIndex(f, ".")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

// computeType checks type first: other compute types have other fields, so
// nothing else is worth reporting when it is wrong. It reports false when
// parsing should stop.
func (d *decoder) computeType(root *yaml.Node, c *api.Compute) bool {
	var tn *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "type" {
			tn = root.Content[i+1]
		}
	}
	if tn == nil || isNull(tn) {
		d.add(0, "type", "required; set type: amlcompute")
		return true // keep going: report the other problems too
	}
	d.lines["type"] = resolve(tn).Line
	s, ok := d.str(tn, "type")
	if !ok {
		return false
	}
	t := strings.ToLower(strings.TrimSpace(s))
	c.Type = t
	switch {
	case t == api.ComputeTypeAmlCompute, t == api.ComputeTypeInstance, t == api.ComputeTypeVirtualMachine, t == api.ComputeTypeKubernetes:
		return true
	case slices.Contains(unsupportedComputeTypes, t):
		d.add(d.lines["type"], "type", "%s is not supported yet; %s", t, supportedTypes)
	default:
		d.add(d.lines["type"], "type", "%q is not a compute type; %s", s, supportedTypes)
	}
	return false
}

// computeExtensions reads tide's own compute settings (the key tide, which
// Azure's schema does not have).
func (d *decoder) computeExtensions(n *yaml.Node, path string) *api.ComputeExtensions {
	if isNull(n) {
		return nil
	}
	x := &api.ComputeExtensions{}
	d.mapping(n, path, []string{"scale_down_policy", "max_starting_nodes", "schedules"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "schedules":
			x.Schedules = d.scheduleList(v, fp, false)
		case "scale_down_policy":
			if s, ok := d.str(v, fp); ok {
				x.ScaleDownPolicy = strings.ToLower(strings.TrimSpace(s))
			}
		case "max_starting_nodes":
			x.MaxStartingNodes, _ = d.integer(v, fp)
		default:
			return false
		}
		return true
	})
	return x
}

func (d *decoder) sshSettings(n *yaml.Node, path string) *api.SSHSettings {
	if isNull(n) {
		return nil
	}
	s := &api.SSHSettings{}
	d.mapping(n, path, []string{"admin_username", "admin_password", "ssh_key_value"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "admin_username":
			s.AdminUsername, _ = d.str(v, fp)
		case "admin_password":
			s.AdminPassword, _ = d.str(v, fp)
		case "ssh_key_value":
			s.SSHKeyValue, _ = d.str(v, fp)
		case "has_admin_password", "has_ssh_key_value":
			d.readOnly(v, fp)
		default:
			return false
		}
		return true
	})
	return s
}

func (d *decoder) networkSettings(n *yaml.Node, path string) *api.NetworkSettings {
	if isNull(n) {
		return nil
	}
	s := &api.NetworkSettings{}
	d.mapping(n, path, []string{"vnet_name", "subnet"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "vnet_name":
			s.VnetName, _ = d.str(v, fp)
		case "subnet":
			if s.Subnet, _ = d.str(v, fp); s.Subnet != "" {
				d.add(resolve(v).Line, fp, "not supported yet: tide's nodes join the Docker network vnet_name names, which has no subnets; remove subnet")
			}
		default:
			return false
		}
		return true
	})
	return s
}

func (d *decoder) identity(n *yaml.Node, path string) *api.Identity {
	if isNull(n) {
		return nil
	}
	id := &api.Identity{}
	d.mapping(n, path, []string{"type", "user_assigned_identities"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "type":
			if s, ok := d.str(v, fp); ok {
				id.Type = strings.ToLower(strings.TrimSpace(s))
			}
		case "user_assigned_identities":
			rv := resolve(v)
			if isNull(rv) {
				return true
			}
			if rv.Kind != yaml.SequenceNode {
				d.add(rv.Line, fp, "must be a list of {resource_id: ...}, got %s", describe(rv))
				return true
			}
			for i, item := range rv.Content {
				ip := fp + "[" + itoa(i) + "]"
				var r api.IdentityResource
				d.mapping(item, ip, []string{"resource_id"}, func(k string, v *yaml.Node, p string) bool {
					if k != "resource_id" {
						return false
					}
					r.ResourceID, _ = d.str(v, p)
					return true
				})
				id.UserAssignedIdentities = append(id.UserAssignedIdentities, r)
			}
		default:
			return false
		}
		return true
	})
	return id
}

// normalizeTier accepts the YAML spellings (dedicated, low_priority) and the
// REST API's (Dedicated, LowPriority) without regard to case, so files and
// ARM-style JSON both work. Anything else is kept for checkCompute to reject.
func normalizeTier(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "dedicated":
		return api.TierDedicated
	case "low_priority", "lowpriority", "low-priority":
		return api.TierLowPriority
	}
	return s
}

// checkCompute applies the rules that need nothing but the compute itself.
// needName is false while parsing, where the server may take the name from
// the URL.
func checkCompute(c *api.Compute, needName bool, bad func(field, format string, args ...any)) {
	switch {
	case c.Name == "" && needName:
		bad("name", "required; 3-24 letters, digits and '-', starting with a letter")
	case c.Name != "":
		if msg := computeNameProblem(c.Name); msg != "" {
			bad("name", "%s", msg)
		} else if ReservedComputeName(c.Name) {
			bad("name", "%q is reserved: a job file's compute: serverless asks for serverless nodes, and %s* names their hidden computes; choose another name", c.Name, api.ServerlessPrefix)
		}
	}
	switch {
	case c.Type == api.ComputeTypeInstance:
		checkInstance(c, bad)
	case c.Type == api.ComputeTypeVirtualMachine:
		checkVirtualMachine(c, bad)
	case c.Type == api.ComputeTypeKubernetes:
		checkKubernetes(c, bad)
	case c.Kubernetes != nil:
		bad("type", "attached cluster fields (namespace, kubeconfig_file, properties) need type: kubernetes")
	case c.VirtualMachine != nil:
		bad("type", "attached machine fields (address, resource_id, host_key) need type: virtualmachine")
	case c.Instance != nil:
		bad("type", "instance fields (idle_time_before_shutdown, schedules, setup_scripts, ...) need type: computeinstance")
	case c.Type == "":
		bad("type", "required; set type: amlcompute")
	case c.Type != api.ComputeTypeAmlCompute:
		bad("type", "%s is not supported yet; %s", c.Type, supportedTypes)
	}
	if t := normalizeTier(c.Tier); t != api.TierDedicated && t != api.TierLowPriority {
		bad("tier", "must be dedicated or low_priority, got %q", c.Tier)
	}
	if c.MinInstances < 0 {
		bad("min_instances", "must be >= 0 (got %d)", c.MinInstances)
	}
	if c.MaxInstances < 0 {
		bad("max_instances", "must be >= 0 (0 pauses the cluster: jobs queue; got %d)", c.MaxInstances)
	}
	if c.MinInstances >= 0 && c.MaxInstances >= 0 && c.MaxInstances < c.MinInstances {
		bad("max_instances", "must be >= min_instances (got %d < %d)", c.MaxInstances, c.MinInstances)
	}
	if c.IdleTimeBeforeScaleDown < 0 {
		bad("idle_time_before_scale_down", "must be >= 0 seconds (got %d)", c.IdleTimeBeforeScaleDown)
	}
	if c.Tide != nil && len(c.Tide.Schedules) > 0 {
		checkSchedules(c.Tide.Schedules, "tide.schedules", false, bad)
	}
	if c.Tide != nil && c.Tide.MaxStartingNodes < 0 {
		bad("tide.max_starting_nodes", "must be >= 0 (0: no cap; got %d)", c.Tide.MaxStartingNodes)
	}
	switch p := c.ScaleDownPolicy(); p {
	case "", api.ScaleDownFixed, api.ScaleDownAdaptive:
	default:
		bad("tide.scale_down_policy", "must be %s or %s (got %q)", api.ScaleDownFixed, api.ScaleDownAdaptive, p)
	}
	for k := range c.Tags {
		if strings.TrimSpace(k) == "" {
			bad("tags", "keys must not be empty")
		}
	}
	if s := c.SSHSettings; s != nil {
		checkSSHKeys(s.SSHKeyValue, bad)
	}
	if s := c.SSHSettings; s != nil && !c.IsInstance() && !c.IsAttached() {
		if s.AdminUsername == "" {
			bad("ssh_settings.admin_username", "required when ssh_settings is set")
		}
	}
	if id := c.Identity; id != nil {
		switch id.Type {
		case "system_assigned", "none":
			if len(id.UserAssignedIdentities) > 0 {
				bad("identity.user_assigned_identities", "only allowed with identity.type user_assigned")
			}
		case "user_assigned", "system_assigned,user_assigned":
			if len(id.UserAssignedIdentities) == 0 {
				bad("identity.user_assigned_identities", "required when identity.type is %s; list {resource_id: ...}", id.Type)
			}
			for i, r := range id.UserAssignedIdentities {
				if strings.TrimSpace(r.ResourceID) == "" {
					bad("identity.user_assigned_identities["+itoa(i)+"].resource_id", "required")
				}
			}
		case "":
			bad("identity.type", "required; one of system_assigned, user_assigned, none")
		default:
			bad("identity.type", "must be system_assigned, user_assigned or none, got %q", id.Type)
		}
	}
}

// computeNameProblem applies Azure's compute name rule: 3 to 24 letters,
// digits and '-', starting with a letter, and every '-' followed later by at
// least one letter (so a name never ends in "-" or "-123").
// checkSSHKeys checks that ssh_key_value holds public keys, one per line
// as in authorized_keys (the node's SSH server accepts each of them).
func checkSSHKeys(v string, bad func(field, format string, args ...any)) {
	for i, line := range strings.Split(v, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Contains(line, "PRIVATE KEY") {
			bad("ssh_settings.ssh_key_value", "line %d is a private key: give the public one (the .pub file, such as ~/.ssh/id_ed25519.pub), and keep the private key to yourself", i+1)
			return
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
			bad("ssh_settings.ssh_key_value", "line %d is not an SSH public key (%v): give the contents of a .pub file, such as ~/.ssh/id_ed25519.pub", i+1, err)
			return
		}
	}
}

func computeNameProblem(name string) string {
	const rule = "3-24 letters, digits and '-', starting with a letter, and every '-' followed later by a letter"
	if len(name) < 3 || len(name) > 24 {
		return errorf("%q must be %s (got %d characters)", name, rule, len(name))
	}
	if !isLetter(name[0]) {
		return errorf("%q must start with a letter", name)
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !isLetter(ch) && !(ch >= '0' && ch <= '9') && ch != '-' {
			return errorf("%q has %q; use only letters, digits and '-'", name, string(rune(ch)))
		}
	}
	if i := strings.LastIndexByte(name, '-'); i >= 0 && !strings.ContainsFunc(name[i+1:], func(r rune) bool { return r < 128 && isLetter(byte(r)) }) {
		return errorf("%q: every '-' must be followed later by a letter (Azure's rule), e.g. %q", name, strings.TrimRight(name[:i], "-")+"-x"+name[i+1:])
	}
	return ""
}

// ReservedComputeName reports whether name is "serverless" or starts with
// api.ServerlessPrefix (in any case): names users cannot give a compute.
func ReservedComputeName(name string) bool {
	l := strings.ToLower(name)
	return l == "serverless" || strings.HasPrefix(l, api.ServerlessPrefix)
}

func isLetter(ch byte) bool { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') }

func itoa(i int) string { return errorf("%d", i) }

// Env is what semantic validation checks a compute against: the server's VM
// size catalog and its configured locations.
type Env struct {
	// Catalog holds the VM sizes; nil means catalog.Default().
	Catalog *catalog.Catalog
	// Locations are the configured location names; empty means any location
	// is accepted (the CLI checking a file offline).
	Locations []string
}

// ValidateCompute checks c in full, including against env: the size must be
// in the catalog (compared without regard to case; c.Size is rewritten to
// the catalog's spelling), the location, when set, must be configured (also
// rewritten to its configured spelling), and tier low_priority needs a
// low-priority-capable size. It also repeats ParseCompute's rules, so it
// suits a compute merged from a PATCH. The error is an Errors.
func ValidateCompute(c *api.Compute, env Env) error {
	var errs collector
	bad := func(field, format string, args ...any) { errs.add(0, field, format, args...) }
	checkCompute(c, true, bad)
	if c.IsAttached() {
		// An attached machine has no size and no configured location.
		return errs.err()
	}
	cat := env.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	c.Tier = normalizeTier(c.Tier)
	if size, ok := cat.Lookup(c.Size); !ok {
		names := make([]string, 0)
		for _, s := range cat.Sizes() {
			names = append(names, s.Name)
		}
		if s := suggest(c.Size, names); s != "" {
			bad("size", "unknown VM size %q; did you mean %s? run 'tide compute list-sizes'", c.Size, s)
		} else {
			bad("size", "unknown VM size %q; run 'tide compute list-sizes'", c.Size)
		}
	} else {
		c.Size = size.Name
		if c.Tier == api.TierLowPriority && !size.LowPriorityCapable {
			bad("tier", "%s cannot run as low_priority; use tier: dedicated or a low-priority-capable size", size.Name)
		}
	}
	if c.Location != "" && len(env.Locations) > 0 {
		i := slices.IndexFunc(env.Locations, func(l string) bool { return strings.EqualFold(l, c.Location) })
		if i < 0 {
			bad("location", "unknown location %q; known locations: %s", c.Location, strings.Join(env.Locations, ", "))
		} else {
			c.Location = env.Locations[i]
		}
	}
	return errs.err()
}

var patchFields = []string{"$schema", "description", "tags", "min_instances", "max_instances", "idle_time_before_scale_down"}
