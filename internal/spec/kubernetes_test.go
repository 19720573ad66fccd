package spec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// k8sFile is Azure's kubernetesCompute file, with the REST API's
// properties (as the Azure CLI passes them) and tide's kubeconfig_file.
const k8sFile = `$schema: https://azuremlschemas.azureedge.net/latest/kubernetesCompute.schema.json
name: k8s-compute
type: kubernetes
namespace: azureml
kubeconfig_file: ~/.kube/config
identity:
  type: system_assigned
properties:
  instanceTypes:
    gpu:
      nodeSelector: {agentpool: gpu}
      tolerations:
        - {key: sku, operator: Equal, value: gpu, effect: NoSchedule, tolerationSeconds: 30}
      resources:
        requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}
        limits: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}
    cpu:
      nodeSelector: null
      resources:
        requests: {cpu: 500m, memory: 1500Mi, nvidia.com/gpu: null}
        limits: {cpu: "1", memory: 2Gi, nvidia.com/gpu: null}
`

func TestKubernetes(t *testing.T) {
	c, err := ParseCompute("k8s.yml", []byte(k8sFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kubernetes
	if !c.IsAttached() || !c.IsKubernetes() || k.Namespace != "azureml" || k.KubeconfigFile != "~/.kube/config" || c.Identity == nil ||
		c.MinInstances != 0 || c.MaxInstances != 0 || c.Size != "" {
		t.Fatalf("got %+v %+v", c, k)
	}
	// The first type of the file is the default when none is named.
	if k.Properties.DefaultInstanceType != "gpu" || len(k.Properties.InstanceTypes) != 2 {
		t.Fatalf("properties %+v", k.Properties)
	}
	gpu := k.Properties.InstanceTypes["gpu"]
	secs := int64(30)
	want := api.InstanceType{NodeSelector: map[string]string{"agentpool": "gpu"},
		Tolerations: []api.Toleration{{Key: "sku", Operator: "Equal", Value: "gpu", Effect: "NoSchedule", TolerationSeconds: &secs}},
		Resources: api.InstanceResources{Requests: map[string]string{"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
			Limits: map[string]string{"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}
	if !reflect.DeepEqual(gpu, want) {
		t.Errorf("gpu type:\n%+v\nwant\n%+v", gpu, want)
	}
	if cpu := k.Properties.InstanceTypes["cpu"]; cpu.NodeSelector != nil || len(cpu.Resources.Requests) != 2 {
		t.Errorf("cpu type: nulls kept: %+v", cpu)
	}
	if got := KubernetesSize("gpu", gpu); got != (api.Size{Name: "gpu", VCPUs: 4, MemoryGB: 16, GPUs: 1}) {
		t.Errorf("gpu size %+v", got)
	}
	if got := KubernetesSize("cpu", k.Properties.InstanceTypes["cpu"]); got != (api.Size{Name: "cpu", VCPUs: 1, MemoryGB: 2}) {
		t.Errorf("cpu size %+v", got)
	}
	if err := ValidateCompute(c, Env{Locations: []string{"local"}}); err != nil {
		t.Fatalf("ValidateCompute: %v", err)
	}

	// Without properties: Azure's defaultinstancetype.
	c, err = ParseCompute("k.yml", []byte("name: k8s\ntype: kubernetes\nkubeconfig_file: kc\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Kubernetes.Properties; c.Kubernetes.Namespace != "default" || p.DefaultInstanceType != "defaultinstancetype" ||
		!reflect.DeepEqual(p.InstanceTypes["defaultinstancetype"], DefaultInstanceType()) {
		t.Errorf("defaults: %+v %+v", c.Kubernetes, c.Kubernetes.Properties)
	}

	// The attached compute sent back as JSON (show -o json) parses the same.
	c, _ = ParseCompute("k8s.yml", []byte(k8sFile), nil)
	c.Kubernetes.HasKubeconfig, c.Kubernetes.KubeconfigSecret = true, "k8s-compute-kubeconfig"
	c.Location, c.Kubernetes.Server = api.AttachedLocation("default", "k8s-compute"), "https://10.0.0.1:6443"
	back := roundTrip(t, c)
	if !reflect.DeepEqual(back.Kubernetes.Properties, c.Kubernetes.Properties) || back.Kubernetes.Namespace != "azureml" {
		t.Errorf("round trip: %+v", back.Kubernetes)
	}
}

func TestKubernetesErrors(t *testing.T) {
	base := "name: k\ntype: kubernetes\nkubeconfig_file: kc\n"
	types := func(body string) string { return base + "properties:\n  instanceTypes:\n    a:\n" + body }
	for _, tt := range []struct{ name, doc, want string }{
		{"resource id", base + "resource_id: /subscriptions/x/resourceGroups/y/providers/Microsoft.Kubernetes/connectedClusters/z\n",
			`k.yml:4: resource_id: "/subscriptions/x/resourceGroups/y/providers/Microsoft.Kubernetes/connectedClusters/z": tide cannot reach a cluster through Azure Arc; give kubeconfig_file`},
		{"no kubeconfig", "name: k\ntype: kubernetes\n", "k.yml: kubeconfig_file: required"},
		{"bad namespace", base + "namespace: Azure_ML\n", `k.yml:4: namespace: "Azure_ML" is not a Kubernetes namespace name: only lowercase letters, digits and '-'`},
		{"cluster field", base + "max_instances: 3\n", "k.yml:4: max_instances: does not apply to an attached Kubernetes cluster"},
		{"ssh", base + "ssh_settings: {admin_username: u}\n", `k.yml:4: unknown field "ssh_settings"`},
		{"extension setting", base + "properties:\n  relayConnectionString: x\n", "k.yml:5: properties.relayConnectionString: is a setting of Azure's Kubernetes extension, which tide does not use; remove it"},
		{"unknown default", base + "properties:\n  defaultInstanceType: b\n  instanceTypes:\n    a: {resources: {}}\n", `k.yml:5: properties.defaultInstanceType: "b" is not one of the instance types (a)`},
		{"unknown resource", types("      resources: {requests: {ephemeral-storage: 1Gi}}\n"), `properties.instanceTypes.a.resources.requests.ephemeral-storage: resource "ephemeral-storage" is not supported yet; an instance type sets cpu, memory, nvidia.com/gpu`},
		{"bad quantity", types("      resources: {limits: {memory: 2GB}}\n"), `properties.instanceTypes.a.resources.limits.memory: "2GB" is not a Kubernetes quantity`},
		{"gpu overcommit", types("      resources: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}\n"), "properties.instanceTypes.a.resources.limits.nvidia.com/gpu: must equal requests' nvidia.com/gpu"},
		{"unknown type field", types("      affinity: {}\n"), `k.yml:7: properties.instanceTypes.a: unknown field "affinity"`},
		{"toleration field", types("      tolerations: [{key: a, tolerations_seconds: 3}]\n"), `properties.instanceTypes.a.tolerations[0]: unknown field "tolerations_seconds"; did you mean "tolerationSeconds"?`},
		{"read-only", base + "kubeconfig_secret: other\n", "k.yml:4: kubeconfig_secret: read-only"},
		{"type name", base + "properties:\n  instanceTypes:\n    Big_One: {resources: {}}\n", `properties.instanceTypes.Big_One: "Big_One" is not a valid instance type name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCompute("k.yml", []byte(tt.doc), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v\nwant %q", err, tt.want)
			}
		})
	}
}
