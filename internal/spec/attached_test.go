package spec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// vmFile is vm-attach.yml's shape with a key instead of a password.
const vmFile = `$schema: https://azuremlschemas.azureedge.net/latest/vmCompute.schema.json
name: vm-example
type: virtualmachine
resource_id: 198.18.0.2
ssh_settings:
  admin_username: root
  ssh_private_key_file: ~/.ssh/id_ed25519
  ssh_port: 2222
`

func TestVirtualMachine(t *testing.T) {
	c, err := ParseCompute("vm.yml", []byte(vmFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsAttached() || c.Address != "198.18.0.2" || c.SSHSettings.SSHPort != 2222 || c.SSHSettings.AdminUsername != "root" ||
		c.SSHSettings.SSHPrivateKeyFile != "~/.ssh/id_ed25519" || c.MinInstances != 1 || c.MaxInstances != 1 || c.Size != "" {
		t.Fatalf("got %+v %+v %+v", c, c.VirtualMachine, c.SSHSettings)
	}
	if err := ValidateCompute(c, Env{Locations: []string{"local"}}); err != nil {
		t.Fatalf("ValidateCompute: %v", err)
	}
	// tide's address with a port, and the whole compute sent back as JSON
	// (what the CLI sends and what show -o json prints) parses the same.
	c, err = ParseCompute("vm.yml", []byte("name: vm-a\ntype: virtualmachine\naddress: '[fd00::2]:2200'\nssh_settings: {admin_username: u, ssh_private_key_file: k}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Address != "fd00::2" || c.SSHSettings.SSHPort != 2200 {
		t.Fatalf("address %q port %d", c.Address, c.SSHSettings.SSHPort)
	}
	c.Location, c.HostKeySource, c.VCPUs = api.AttachedLocation("default", "vm-a"), api.HostKeyFirstUse, 4
	back := roundTrip(t, c)
	if back.Address != c.Address || back.SSHSettings.SSHPort != 2200 {
		t.Errorf("round trip: %+v", back.VirtualMachine)
	}
}

// roundTrip sends c back as a client would (show -o json, status fields
// stripped) and parses it.
func roundTrip(t *testing.T, c *api.Compute) *api.Compute {
	t.Helper()
	body, _ := json.Marshal(c)
	doc := map[string]any{}
	_ = json.Unmarshal(body, &doc)
	StripStatus(KindCompute, doc)
	body, _ = json.Marshal(doc)
	back, err := ParseCompute("body", body, nil)
	if err != nil {
		t.Fatalf("round trip: %v\n%s", err, body)
	}
	return back
}

func TestVirtualMachineErrors(t *testing.T) {
	base := "name: vm-a\ntype: virtualmachine\n"
	login := "ssh_settings:\n  admin_username: u\n  ssh_private_key_file: k\n"
	tests := []struct{ yaml, want string }{
		{base + login, "c.yml: address: required: the machine's host name or IP address (HOST[:PORT]); Azure's files name it by resource_id"},
		{base + "resource_id: /subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v\n" + login,
			"c.yml:3: resource_id: \"/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v\" is an Azure resource id, which tide cannot resolve; set address: HOST[:PORT] (or resource_id: HOST)"},
		{base + "address: h:22\nssh_settings: {admin_username: u, ssh_private_key_file: k, ssh_port: 23}\n",
			"c.yml:3: address: port 22 differs from ssh_settings.ssh_port 23; give the port once"},
		{base + "address: h:99999\n" + login, "c.yml:3: address: \"h:99999\": the port must be 1-65535"},
		{base + "address: root@h\n" + login, "c.yml:3: address: \"root@h\" is not a host name or IP address (HOST[:PORT]; the user goes in ssh_settings.admin_username)"},
		{base + "address: h\n", "c.yml: ssh_settings: required: admin_username and ssh_private_key_file (the login tide starts its agent with)"},
		{base + "address: h\nssh_settings: {admin_username: u}\n", "c.yml:4: ssh_settings.ssh_private_key_file: required: the private key the machine accepts for admin_username"},
		{base + "address: h\nssh_settings: {admin_username: u, admin_password: p}\n",
			"c.yml:4: ssh_settings.admin_password: password logins are not supported yet: tide logs in to an attached machine with a key; set ssh_private_key_file (and add its public key to the machine's authorized_keys) and remove admin_password"},
		{base + "address: h\nhost_key: nope\n" + login, "c.yml:4: host_key: not an SSH public key (ssh: no key found): give the machine's host key as ssh-keyscan prints it, without the host name (\"ssh-ed25519 AAAA...\"), or remove host_key to trust the key the machine shows at attach"},
		{base + "address: h\nmax_instances: 3\n" + login, "c.yml:4: max_instances: does not apply to an attached machine (one node with the machine's own CPUs and memory); remove it"},
		{base + "address: h\nsize: Standard_DS3_v2\n" + login, "c.yml:4: size: does not apply to an attached machine (one node with the machine's own CPUs and memory); remove it"},
		{base + "address: h\nlocation: westus\n" + login, "c.yml:4: location: does not apply to an attached machine (it is where it is); remove it"},
		{base + "address: h\nssh_setings: {}\n", "c.yml:4: unknown field \"ssh_setings\"; did you mean \"ssh_settings\"?"},
		{base + "address: h\nssh_settings: {admin_username: u, ssh_private_key: not-a-key}\n",
			"c.yml:4: ssh_settings.ssh_private_key: not an unencrypted private key (ssh: no key found); tide needs an OpenSSH or PEM key without a passphrase"},
	}
	for _, tt := range tests {
		_, err := ParseCompute("c.yml", []byte(tt.yaml), nil)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s\ngot:  %v\nwant: %s", strings.ReplaceAll(tt.yaml, "\n", "; "), err, tt.want)
		}
	}
}
