package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// computeFlag is one of az ml compute create's flags and the field of the
// compute file it sets. Flags override the file, as in az ml: each becomes
// a --set of its field.
type computeFlag struct {
	name, field, usage string
	boolean            bool
}

// computeFlags are `az ml compute create`'s flags, with its names.
var computeFlags = []computeFlag{
	{name: "type", field: "type", usage: "compute type: AmlCompute, ComputeInstance, VirtualMachine or Kubernetes"},
	{name: "size", field: "size", usage: "VM size, e.g. Standard_DS3_v2 ('tide compute list-sizes')"},
	{name: "min-instances", field: "min_instances", usage: "minimum number of nodes (AmlCompute)"},
	{name: "max-instances", field: "max_instances", usage: "maximum number of nodes (AmlCompute)"},
	{name: "idle-time-before-scale-down", field: "idle_time_before_scale_down", usage: "seconds a node stays idle before it is removed (AmlCompute)"},
	{name: "tier", field: "tier", usage: "dedicated or low_priority (AmlCompute)"},
	{name: "location", field: "location", usage: "location the nodes come from ('tide location list')"},
	{name: "description", field: "description", usage: "description"},
	{name: "admin-username", field: "ssh_settings.admin_username", usage: "SSH user name on the nodes"},
	{name: "admin-password", field: "ssh_settings.admin_password", usage: "SSH password (stored, never returned)"},
	{name: "ssh-key-value", field: "ssh_settings.ssh_key_value", usage: "SSH public key that may log in to the nodes"},
	{name: "ssh-public-access-enabled", field: "ssh_public_access_enabled", usage: "whether the nodes accept SSH", boolean: true},
	{name: "vnet-name", field: "network_settings.vnet_name", usage: "network the nodes join"},
	{name: "subnet", field: "network_settings.subnet", usage: "subnet the nodes join (not supported yet: refused)"},
	{name: "enable-node-public-ip", field: "enable_node_public_ip", usage: "whether nodes get a public address", boolean: true},
	{name: "identity-type", field: "identity.type", usage: "system_assigned or user_assigned"},
	{name: "user-tenant-id", field: "create_on_behalf_of.user_tenant_id", usage: "tenant of the user the instance is created for (ComputeInstance)"},
	{name: "user-object-id", field: "create_on_behalf_of.user_object_id", usage: "user the instance is created for (ComputeInstance)"},
}

// addComputeFlags registers computeFlags on cmd, storing values in vals.
func addComputeFlags(cmd *cobra.Command, vals map[string]*string) {
	f := cmd.Flags()
	for _, cf := range computeFlags {
		v := new(string)
		vals[cf.name] = v
		if cf.boolean {
			f.StringVar(v, cf.name, "", cf.usage+" (true or false)")
			f.Lookup(cf.name).NoOptDefVal = "true"
			continue
		}
		f.StringVar(v, cf.name, "", cf.usage)
	}
}

// computeFlagSets turns the flags the user gave into --set overrides, in
// the table's order, after the explicit --set ones so flags win as in az ml.
func computeFlagSets(cmd *cobra.Command, vals map[string]*string, sets []string) []string {
	out := append([]string(nil), sets...)
	for _, cf := range computeFlags {
		if !changed(cmd, cf.name) {
			continue
		}
		out = append(out, cf.field+"="+strings.TrimSpace(*vals[cf.name]))
	}
	return out
}
