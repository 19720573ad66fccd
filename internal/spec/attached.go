package spec

import (
	"net"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

// virtualMachineFields are the fields of Azure ML's vmCompute schema tide
// reads, with tide's address and host_key.
var virtualMachineFields = []string{"$schema", "name", "type", "description", "tags", "resource_id", "address", "host_key", "ssh_settings"}

// virtualMachineStatusFields are set by the server on an attached machine.
var virtualMachineStatusFields = map[string]bool{
	"host_key_source": true, "host_key_fingerprint": true, "vcpus": true, "memory_gb": true, "gpus": true,
	"credentials_secret": true, "compute_location": true, "runtime": true,
}

// attachedImplied are the cluster fields an attached machine has, with
// the values it has: a whole api.Compute sent as JSON carries them.
var attachedImplied = map[string]string{
	"min_instances": "1", "max_instances": "1", "idle_time_before_scale_down": "0", "tier": api.TierDedicated, "size": "",
}

// parseVirtualMachine reads the fields of a virtualmachine document into c.
func (d *decoder) parseVirtualMachine(root *yaml.Node, c *api.Compute) {
	vm := &api.VirtualMachine{}
	c.VirtualMachine = vm
	c.MinInstances, c.MaxInstances, c.Tier = 1, 1, api.TierDedicated
	d.mapping(root, "", virtualMachineFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonComputeField(c, key, v, fp) {
			return true
		}
		switch key {
		case "resource_id":
			vm.ResourceID, _ = d.str(v, fp)
		case "address":
			vm.Address, _ = d.str(v, fp)
		case "host_key":
			if s, ok := d.str(v, fp); ok {
				vm.HostKey = strings.TrimSpace(s)
			}
		case "ssh_settings":
			c.SSHSettings = d.machineSSHSettings(v, fp)
		case "location":
			// The server sets an attached machine's location; a body
			// sent back carries it.
			if s, ok := d.str(v, fp); ok && s != "" && !strings.HasPrefix(s, "attached:") {
				d.add(d.lines[fp], fp, "does not apply to an attached machine (it is where it is); remove it")
			}
		default:
			if want, ok := attachedImplied[key]; ok {
				if s, ok := d.str(v, fp); ok && s != want {
					d.add(d.lines[fp], fp, "does not apply to an attached machine (one node with the machine's own CPUs and memory); remove it")
				}
				return true
			}
			if computeStatusFields[key] || virtualMachineStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	d.machineAddress(c)
}

// machineSSHSettings reads an attached machine's ssh_settings (Azure's
// VirtualMachineSshSettings, with tide's ssh_private_key for the key's
// contents).
func (d *decoder) machineSSHSettings(n *yaml.Node, path string) *api.SSHSettings {
	if isNull(n) {
		return nil
	}
	s := &api.SSHSettings{}
	d.mapping(n, path, []string{"admin_username", "admin_password", "ssh_port", "ssh_private_key_file", "ssh_private_key"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "admin_username":
			s.AdminUsername, _ = d.str(v, fp)
		case "admin_password":
			if s.AdminPassword, _ = d.str(v, fp); s.AdminPassword != "" {
				d.add(d.lines[fp], fp, "password logins are not supported yet: tide logs in to an attached machine with a key; set ssh_private_key_file (and add its public key to the machine's authorized_keys) and remove admin_password")
			}
		case "ssh_port":
			s.SSHPort, _ = d.integer(v, fp)
		case "ssh_private_key_file":
			s.SSHPrivateKeyFile, _ = d.str(v, fp)
		case "ssh_private_key":
			s.SSHPrivateKey, _ = d.str(v, fp)
		case "has_ssh_private_key":
			d.readOnly(v, fp)
		default:
			return false
		}
		return true
	})
	return s
}

// machineAddress moves a ":PORT" of address (or of a resource_id that is
// a host) to ssh_settings.ssh_port.
func (d *decoder) machineAddress(c *api.Compute) {
	vm := c.VirtualMachine
	field, addr := "address", vm.Address
	if addr == "" && vm.ResourceID != "" && !strings.Contains(vm.ResourceID, "/") {
		field, addr = "resource_id", vm.ResourceID
	}
	if addr == "" {
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// No port (or a bare IPv6 address).
		vm.Address = strings.Trim(addr, "[]")
		return
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		d.add(d.lineFor(field), field, "%q: the port must be 1-65535", addr)
		return
	}
	vm.Address = host
	if c.SSHSettings == nil {
		c.SSHSettings = &api.SSHSettings{}
	}
	switch c.SSHSettings.SSHPort {
	case 0:
		c.SSHSettings.SSHPort = p
	case p:
	default:
		d.add(d.lineFor(field), field, "port %d differs from ssh_settings.ssh_port %d; give the port once", p, c.SSHSettings.SSHPort)
	}
}

// checkVirtualMachine applies an attached machine's rules.
func checkVirtualMachine(c *api.Compute, bad func(field, format string, args ...any)) {
	vm := c.VirtualMachine
	if vm == nil {
		bad("address", "required: the machine's host name or IP address (HOST[:PORT])")
		return
	}
	if c.MinInstances != 1 || c.MaxInstances != 1 || c.IdleTimeBeforeScaleDown != 0 || c.Size != "" {
		bad("type", "an attached machine is one node with the machine's own CPUs and memory: size, min_instances, max_instances and idle_time_before_scale_down do not apply")
	}
	switch {
	case vm.Address == "" && vm.ResourceID == "":
		bad("address", "required: the machine's host name or IP address (HOST[:PORT]); Azure's files name it by resource_id")
	case vm.Address == "" && strings.Contains(vm.ResourceID, "/"):
		bad("resource_id", "%q is an Azure resource id, which tide cannot resolve; set address: HOST[:PORT] (or resource_id: HOST)", vm.ResourceID)
	case vm.Address != "" && vm.ResourceID != "" && !strings.Contains(vm.ResourceID, "/") && !sameHost(vm.ResourceID, vm.Address):
		bad("resource_id", "%q names another machine than address %q; give one of them", vm.ResourceID, vm.Address)
	case strings.ContainsAny(vm.Address, " \t/@"):
		bad("address", "%q is not a host name or IP address (HOST[:PORT]; the user goes in ssh_settings.admin_username)", vm.Address)
	}
	if vm.HostKey != "" {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(vm.HostKey)); err != nil {
			bad("host_key", "not an SSH public key (%v): give the machine's host key as ssh-keyscan prints it, without the host name (\"ssh-ed25519 AAAA...\"), or remove host_key to trust the key the machine shows at attach", err)
		}
	}
	s := c.SSHSettings
	if s == nil {
		bad("ssh_settings", "required: admin_username and ssh_private_key_file (the login tide starts its agent with)")
		return
	}
	if s.AdminUsername == "" {
		bad("ssh_settings.admin_username", "required: the user tide logs in as and runs its agent as")
	}
	if s.SSHPort < 0 || s.SSHPort > 65535 {
		bad("ssh_settings.ssh_port", "must be 1-65535 (got %d)", s.SSHPort)
	}
	if s.SSHKeyValue != "" {
		bad("ssh_settings.ssh_key_value", "does not apply to an attached machine; tide logs in with ssh_private_key_file")
	}
	if s.SSHPrivateKeyFile == "" && s.SSHPrivateKey == "" && !s.HasSSHPrivateKey && s.AdminPassword == "" {
		bad("ssh_settings.ssh_private_key_file", "required: the private key the machine accepts for admin_username")
	}
	if s.SSHPrivateKey != "" {
		if _, err := ssh.ParsePrivateKey([]byte(s.SSHPrivateKey)); err != nil {
			field := "ssh_settings.ssh_private_key"
			if s.SSHPrivateKeyFile != "" {
				field = "ssh_settings.ssh_private_key_file"
			}
			bad(field, "not an unencrypted private key (%v); tide needs an OpenSSH or PEM key without a passphrase", err)
		}
	}
	if c.SSHPublicAccessEnabled != nil || c.NetworkSettings != nil || c.Identity != nil || c.Tide != nil || c.Instance != nil {
		bad("type", "cluster and instance fields (ssh_public_access_enabled, network_settings, identity, tide, ...) do not apply to an attached machine")
	}
}

// sameHost compares a HOST[:PORT] with a host.
func sameHost(hostPort, host string) bool {
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		hostPort = h
	}
	return strings.EqualFold(strings.Trim(hostPort, "[]"), host)
}
