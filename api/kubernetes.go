package api

import (
	"maps"
	"slices"
)

// ComputeTypeKubernetes is Azure ML's attached Kubernetes cluster
// (KubernetesCompute): each job gets Pods of the instance type it names,
// made in the compute's namespace and deleted when it ends.
const ComputeTypeKubernetes = "kubernetes"

// Kubernetes holds the fields of an attached Kubernetes cluster (type
// kubernetes), flattened into the compute as Azure's file has them:
// namespace at the top, the instance types under properties as Azure's
// REST API names them (instanceTypes, defaultInstanceType).
type Kubernetes struct {
	// Namespace holds the jobs' Pods and Secrets; it must exist.
	// Default "default", as Azure's.
	Namespace string `json:"namespace,omitempty"`
	// KubeconfigFile is the kubeconfig file on the client (tide's field:
	// Azure reaches the cluster through Azure Arc); the CLI sends its
	// contents as Kubeconfig.
	KubeconfigFile string `json:"kubeconfig_file,omitempty"`
	// Kubeconfig is the kubeconfig itself. The server keeps it as a
	// workspace secret and never returns it; HasKubeconfig tells it is
	// set.
	Kubeconfig    string `json:"kubeconfig,omitempty"`
	HasKubeconfig bool   `json:"has_kubeconfig,omitempty"`
	// Properties are Azure's KubernetesProperties that tide reads.
	Properties *KubernetesProperties `json:"properties,omitempty"`

	// Status, set by the server.

	// KubeconfigSecret names the workspace secret that holds the
	// kubeconfig; it goes with the compute.
	KubeconfigSecret string `json:"kubeconfig_secret,omitempty"`
	// Server is the API server the kubeconfig's context points at.
	Server string `json:"server,omitempty"`
}

// KubernetesProperties are the instance types of an attached Kubernetes
// compute, as Azure's REST API has them.
type KubernetesProperties struct {
	// DefaultInstanceType is the type of a job that names none (default:
	// the first type of the file).
	DefaultInstanceType string `json:"defaultInstanceType,omitempty"`
	// InstanceTypes are the Pod shapes jobs choose from by
	// resources.instance_type.
	InstanceTypes map[string]InstanceType `json:"instanceTypes,omitempty"`
}

// InstanceType is one Pod shape of an attached Kubernetes compute.
type InstanceType struct {
	// NodeSelector places the Pods on the cluster's nodes with these
	// labels.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations let the Pods run on tainted nodes (tide's addition to
	// Azure's instance type, in Kubernetes' own shape).
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// Resources are the agent container's requests and limits: cpu,
	// memory and nvidia.com/gpu, in Kubernetes quantities ("500m",
	// "4Gi").
	Resources InstanceResources `json:"resources"`
}

// InstanceResources are an instance type's requests and limits.
type InstanceResources struct {
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

// Toleration is a Kubernetes Pod toleration.
type Toleration struct {
	Key               string `json:"key,omitempty"`
	Operator          string `json:"operator,omitempty"`
	Value             string `json:"value,omitempty"`
	Effect            string `json:"effect,omitempty"`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// JobComputePrefix starts the name of the hidden compute of each job's
// Pods on attached Kubernetes compute name: name and a dot, which compute
// names cannot hold, so no compute a user makes has it and listing the
// jobs of the attached compute finds them by it.
func JobComputePrefix(name string) string { return name + "." }

// InstanceTypeNames returns the instance types of k, sorted.
func (k *Kubernetes) InstanceTypeNames() []string {
	if k == nil || k.Properties == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(k.Properties.InstanceTypes))
}

// IsKubernetes reports whether c is an attached Kubernetes cluster
// (not the hidden compute of one job's Pods).
func (c *Compute) IsKubernetes() bool {
	return c.Type == ComputeTypeKubernetes && c.ServerlessJob == ""
}

// CredentialsSecretName is the workspace secret an attached compute
// keeps its credentials in (a machine's key, a cluster's kubeconfig); ""
// for other computes.
func (c *Compute) CredentialsSecretName() string {
	switch {
	case !c.IsAttached():
		return ""
	case c.VirtualMachine != nil:
		return c.VirtualMachine.CredentialsSecret
	case c.Kubernetes != nil:
		return c.Kubernetes.KubeconfigSecret
	}
	return ""
}
