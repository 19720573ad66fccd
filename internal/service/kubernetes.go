package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// Attaching a Kubernetes cluster (a compute of type kubernetes) reaches
// its API server with the kubeconfig first (ProbeKubernetes), so a
// kubeconfig that cannot reach the cluster, or whose user may not manage
// Pods and Secrets in the namespace, is refused with the API server's
// words and nothing stored. The kubeconfig goes into a workspace secret
// that goes with the compute.
//
// The attached compute holds no nodes: as Azure's Kubernetes compute, it
// gives each job Pods of the instance type the job names. Those Pods are
// the nodes of a hidden compute made with the job, as a serverless job's
// (serverless.go): its location is the cluster's (so the controller
// reaches them through the provider built from the cluster's record) and
// it carries a copy of the instance type, which the kubernetes provider
// turns into the Pods' requests, limits, node selector and tolerations.

// KubernetesProbe reaches the cluster an attached Kubernetes compute
// names with kubeconfig, checks that tide may do there what it needs, and
// returns the API server's URL. A failure the user can fix is a
// *ProbeError.
type KubernetesProbe func(ctx context.Context, c *api.Compute, kubeconfig string) (string, error)

// kubeconfigSecret names the workspace secret holding an attached
// cluster's kubeconfig.
func kubeconfigSecret(name string) string { return name + "-kubeconfig" }

// attachKubernetes creates an attached Kubernetes compute: it reaches the
// cluster, then stores the compute and its secret in one transaction.
func (s *Service) attachKubernetes(ctx context.Context, ws string, c *api.Compute) (*api.Compute, error) {
	k := c.Kubernetes
	if k.Kubeconfig == "" {
		return nil, &Error{Status: 400, Code: api.CodeValidation, Field: "kubeconfig_file",
			Msg: "kubeconfig_file: the server cannot read files of the client; send the kubeconfig itself as kubeconfig ('tide compute attach -f FILE' does)"}
	}
	if s.ProbeKubernetes == nil {
		return nil, errorf(501, api.CodeNotSupported, "this server cannot attach Kubernetes clusters")
	}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		return s.attachable(ctx, tx, ws, c.Name, kubeconfigSecret(c.Name))
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "compute", c.Name)
	}
	server, err := s.ProbeKubernetes(ctx, c, k.Kubeconfig)
	if err != nil {
		return nil, probeFailed(c.Name, "nothing was stored", err)
	}
	kubeconfig := k.Kubeconfig
	k.Kubeconfig, k.KubeconfigFile, k.HasKubeconfig = "", "", true
	k.KubeconfigSecret, k.Server = kubeconfigSecret(c.Name), server
	var types []string
	for _, name := range k.InstanceTypeNames() {
		types = append(types, fmt.Sprintf("%s (%s)", name, instanceTypeSummary(k.Properties.InstanceTypes[name])))
	}
	msg := fmt.Sprintf("Kubernetes cluster %s attached, namespace %s; instance types: %s; default %s",
		server, k.Namespace, strings.Join(types, ", "), k.Properties.DefaultInstanceType)
	return s.storeAttached(ctx, ws, c, kubeconfig, msg, func(store.Tx) error { return nil })
}

// instanceTypeSummary is how events show an instance type's resources.
func instanceTypeSummary(it api.InstanceType) string {
	var parts []string
	for _, part := range []struct {
		name string
		m    map[string]string
	}{{"requests", it.Resources.Requests}, {"limits", it.Resources.Limits}} {
		var kv []string
		for _, res := range []string{"cpu", "memory", "nvidia.com/gpu"} {
			if v, ok := part.m[res]; ok {
				kv = append(kv, res+" "+v)
			}
		}
		if len(kv) > 0 {
			parts = append(parts, part.name+" "+strings.Join(kv, ", "))
		}
	}
	if len(parts) == 0 {
		return "no requests or limits"
	}
	return strings.Join(parts, "; ")
}

// kubernetesJob makes the hidden compute of job j's Pods on attached
// cluster k, in tx, and points j at it. preUpload only checks the
// instance type.
func (s *Service) kubernetesJob(ctx context.Context, tx store.Tx, ws string, j *api.Job, k *api.Compute, preUpload bool) error {
	props := k.Kubernetes.Properties
	name := props.DefaultInstanceType
	if j.Resources != nil && j.Resources.InstanceType != "" {
		name = j.Resources.InstanceType
	}
	it, ok := props.InstanceTypes[name]
	if !ok {
		e := errorf(400, api.CodeValidation, "resources.instance_type: %q is not an instance type of Kubernetes compute %s; its types: %s (default %s)",
			name, k.Name, strings.Join(k.Kubernetes.InstanceTypeNames(), ", "), props.DefaultInstanceType)
		e.Field = "resources.instance_type"
		return e
	}
	if preUpload {
		return nil
	}
	c := &api.Compute{
		Type: api.ComputeTypeKubernetes, Workspace: ws, Location: k.Location, Tier: api.TierDedicated,
		Description: fmt.Sprintf("Pods of job %s on Kubernetes compute %s", j.Name, k.Name), ServerlessJob: j.Name,
		MaxInstances: j.InstanceCount(), Identity: k.Identity,
		Kubernetes: &api.Kubernetes{Namespace: k.Kubernetes.Namespace, Properties: &api.KubernetesProperties{
			DefaultInstanceType: name, InstanceTypes: map[string]api.InstanceType{name: it}}},
	}
	now := s.now()
	if err := putHidden(ctx, tx, ws, api.JobComputePrefix(k.Name), c, now); err != nil {
		return err
	}
	j.Compute = c.Name
	j.Serverless = &api.JobServerless{InstanceType: name, InstanceCount: j.InstanceCount(), Tier: c.Tier, Location: c.Location, Kubernetes: k.Name}
	return tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: "Created",
		Message: fmt.Sprintf("Pods of job %s on Kubernetes compute %s: %d × %s (%s), namespace %s", j.Name, k.Name, j.InstanceCount(), name, instanceTypeSummary(it), k.Kubernetes.Namespace)})
}
