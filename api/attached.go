package api

import "strings"

// ComputeTypeVirtualMachine is Azure ML's attached virtual machine: an
// existing machine tide reaches over SSH and runs one node on.
const ComputeTypeVirtualMachine = "virtualmachine"

// Host key sources of VirtualMachine.HostKeySource.
const (
	HostKeyPinned          = "pinned"
	HostKeyFirstUse        = "trust_on_first_use"
	attachedLocationPrefix = "attached:"
)

// VirtualMachine holds the fields of an attached machine (type
// virtualmachine), flattened into the compute as Azure's file has them.
// The login (ssh_settings) is in Compute.SSHSettings.
type VirtualMachine struct {
	// ResourceID is how Azure names the machine. tide cannot resolve an
	// Azure resource id: it takes a host name or address here (as
	// Address) and refuses an id with a hint.
	ResourceID string `json:"resource_id,omitempty"`
	// Address is the machine's host name or IP address (tide's field; a
	// ":PORT" in a file moves to ssh_settings.ssh_port).
	Address string `json:"address,omitempty"`
	// HostKey is the machine's SSH host key, in authorized_keys format.
	// Set in the file, it is pinned; left out, the key the machine shows
	// at attach is trusted and recorded here (trust on first use).
	HostKey string `json:"host_key,omitempty"`

	// Status, set by the server.

	// HostKeySource says where HostKey came from: HostKeyPinned or
	// HostKeyFirstUse.
	HostKeySource string `json:"host_key_source,omitempty"`
	// HostKeyFingerprint is HostKey's SHA256 fingerprint, as ssh-keygen -l
	// prints it.
	HostKeyFingerprint string `json:"host_key_fingerprint,omitempty"`
	// VCPUs, MemoryGB and GPUs are the machine's, read at attach: its one
	// node has all of them.
	VCPUs    int      `json:"vcpus,omitempty"`
	MemoryGB float64  `json:"memory_gb,omitempty"`
	GPUs     []string `json:"gpus,omitempty"`
	// CredentialsSecret names the workspace secret that holds the login's
	// private key; it goes with the compute.
	CredentialsSecret string `json:"credentials_secret,omitempty"`
}

// IsAttached reports whether c is attached through the API rather than
// made by tide: a machine (type virtualmachine) or a Kubernetes cluster
// (type kubernetes). The hidden compute of one job's Pods on an attached
// cluster is not.
func (c *Compute) IsAttached() bool {
	return c.Type == ComputeTypeVirtualMachine || c.IsKubernetes()
}

// AttachedLocation is the location of an attached compute's node: its
// provider is built from the compute's record, not from a configured
// location.
func AttachedLocation(ws, name string) string { return attachedLocationPrefix + ws + "/" + name }

// ParseAttachedLocation returns the workspace and compute an attached
// location names; ok is false for a configured location.
func ParseAttachedLocation(loc string) (ws, name string, ok bool) {
	rest, ok := strings.CutPrefix(loc, attachedLocationPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// AttachedSize is the size of an attached machine's node: the machine's
// own figures.
func (vm *VirtualMachine) AttachedSize() Size {
	return Size{Name: "attached", VCPUs: vm.VCPUs, MemoryGB: vm.MemoryGB, GPUs: len(vm.GPUs)}
}
