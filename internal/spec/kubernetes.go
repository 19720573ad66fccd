package spec

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tideml/tide/api"
)

// An attached Kubernetes cluster's file is Azure's kubernetesCompute file
// (name, type, description, tags, resource_id, namespace, identity,
// properties), with tide's kubeconfig_file for how to reach the cluster:
// Azure reaches it through Azure Arc, which tide cannot. properties holds
// Azure's REST KubernetesProperties as the Azure CLI passes them:
// defaultInstanceType and instanceTypes (nodeSelector, resources; tide adds
// tolerations).

// kubernetesFields are the fields of a kubernetes document.
var kubernetesFields = []string{"$schema", "name", "type", "description", "tags", "resource_id", "namespace",
	"identity", "properties", "kubeconfig_file", "kubeconfig"}

// kubernetesStatusFields are set by the server on an attached cluster.
var kubernetesStatusFields = map[string]bool{
	"has_kubeconfig": true, "kubeconfig_secret": true, "server": true, "compute_location": true, "runtime": true,
}

// kubernetesImplied are the cluster fields an attached Kubernetes compute
// has, with the values it has: it holds no nodes of its own (each job gets
// Pods of its own).
var kubernetesImplied = map[string]string{
	"min_instances": "0", "max_instances": "0", "idle_time_before_scale_down": "0", "tier": api.TierDedicated, "size": "",
}

// DefaultKubernetesNamespace is Azure's default namespace of a
// Kubernetes compute.
const DefaultKubernetesNamespace = "default"

// DefaultInstanceTypeName and DefaultInstanceType are what Azure's
// extension gives a cluster with no instance type of its own.
const DefaultInstanceTypeName = "defaultinstancetype"

// DefaultInstanceType returns Azure's default instance type: 100m CPU
// and 2Gi memory requested, 2 CPUs and 2Gi memory at most.
func DefaultInstanceType() api.InstanceType {
	return api.InstanceType{Resources: api.InstanceResources{
		Requests: map[string]string{"cpu": "100m", "memory": "2Gi"},
		Limits:   map[string]string{"cpu": "2", "memory": "2Gi"},
	}}
}

// instanceResourceNames are the resources an instance type may set.
var instanceResourceNames = []string{"cpu", "memory", "nvidia.com/gpu"}

// parseKubernetes reads the fields of a kubernetes document into c.
func (d *decoder) parseKubernetes(root *yaml.Node, c *api.Compute) {
	k := &api.Kubernetes{}
	c.Kubernetes = k
	c.Tier = api.TierDedicated
	d.mapping(root, "", kubernetesFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonComputeField(c, key, v, fp) {
			return true
		}
		switch key {
		case "resource_id":
			if s, ok := d.str(v, fp); ok && s != "" {
				d.add(d.lines[fp], fp, "%q: tide cannot reach a cluster through Azure Arc; give kubeconfig_file: the kubeconfig of a user or service account that may manage Pods and Secrets in the namespace, and remove resource_id", s)
			}
		case "namespace":
			k.Namespace, _ = d.str(v, fp)
		case "kubeconfig_file":
			k.KubeconfigFile, _ = d.str(v, fp)
		case "kubeconfig":
			k.Kubeconfig, _ = d.str(v, fp)
		case "identity":
			c.Identity = d.identity(v, fp)
		case "properties":
			k.Properties = d.kubernetesProperties(v, fp)
		case "location":
			if s, ok := d.str(v, fp); ok && s != "" && !strings.HasPrefix(s, "attached:") {
				d.add(d.lines[fp], fp, "does not apply to an attached cluster (it is where it is); remove it")
			}
		default:
			if want, ok := kubernetesImplied[key]; ok {
				if s, ok := d.str(v, fp); ok && s != want {
					d.add(d.lines[fp], fp, "does not apply to an attached Kubernetes cluster: each job gets Pods of the instance type it names (resources.instance_type); remove it")
				}
				return true
			}
			if computeStatusFields[key] || kubernetesStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if k.Namespace == "" {
		k.Namespace = DefaultKubernetesNamespace
	}
	if k.Properties == nil || len(k.Properties.InstanceTypes) == 0 {
		def := ""
		if k.Properties != nil {
			def = k.Properties.DefaultInstanceType
		}
		if def == "" || def == DefaultInstanceTypeName {
			k.Properties = &api.KubernetesProperties{DefaultInstanceType: DefaultInstanceTypeName,
				InstanceTypes: map[string]api.InstanceType{DefaultInstanceTypeName: DefaultInstanceType()}}
		}
	}
}

// kubernetesProperties reads properties: {defaultInstanceType,
// instanceTypes}; Azure's other KubernetesProperties are about its
// extension and are refused by name.
func (d *decoder) kubernetesProperties(n *yaml.Node, path string) *api.KubernetesProperties {
	if isNull(n) {
		return nil
	}
	p := &api.KubernetesProperties{}
	var first string
	d.mapping(n, path, []string{"defaultInstanceType", "instanceTypes"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "defaultInstanceType":
			p.DefaultInstanceType, _ = d.str(v, fp)
		case "instanceTypes":
			if isNull(v) {
				return true
			}
			p.InstanceTypes = map[string]api.InstanceType{}
			d.mapping(v, fp, nil, func(name string, tv *yaml.Node, tp string) bool {
				if first == "" {
					first = name
				}
				p.InstanceTypes[name] = d.instanceType(tv, tp)
				return true
			})
		case "namespace":
			// A body sent back may carry Azure's copy; the top-level
			// namespace is tide's.
			d.add(d.lines[fp], fp, "give the namespace at the top of the file (namespace: NAME), as Azure's file has it")
		case "relayConnectionString", "serviceBusConnectionString", "extensionPrincipalId", "extensionInstanceReleaseTrain", "vcName":
			d.add(d.lines[fp], fp, "is a setting of Azure's Kubernetes extension, which tide does not use; remove it")
		default:
			return false
		}
		return true
	})
	if p.DefaultInstanceType == "" {
		// Azure's default is the type named defaultinstancetype; tide's
		// is the first type of the file when none is named so.
		if _, ok := p.InstanceTypes[DefaultInstanceTypeName]; ok {
			p.DefaultInstanceType = DefaultInstanceTypeName
		} else {
			p.DefaultInstanceType = first
		}
	}
	return p
}

// instanceType reads one instance type.
func (d *decoder) instanceType(n *yaml.Node, path string) api.InstanceType {
	var it api.InstanceType
	if isNull(n) {
		d.add(d.lines[path], path, "must set resources: {requests: {cpu, memory}, limits: {...}}")
		return it
	}
	d.mapping(n, path, []string{"nodeSelector", "tolerations", "resources"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "nodeSelector":
			it.NodeSelector = withoutNulls(d.strMap(v, fp))
		case "tolerations":
			it.Tolerations = d.tolerations(v, fp)
		case "resources":
			d.mapping(v, fp, []string{"requests", "limits"}, func(rk string, rv *yaml.Node, rp string) bool {
				switch rk {
				case "requests":
					it.Resources.Requests = withoutNulls(d.strMap(rv, rp))
				case "limits":
					it.Resources.Limits = withoutNulls(d.strMap(rv, rp))
				default:
					return false
				}
				return true
			})
		default:
			return false
		}
		return true
	})
	return it
}

// withoutNulls removes the null values Azure's files carry
// ("nvidia.com/gpu": null).
func withoutNulls(m map[string]string) map[string]string {
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

var tolerationFields = []string{"key", "operator", "value", "effect", "tolerationSeconds"}

// tolerations reads a list of Kubernetes tolerations; their values are
// left for the API server to check at attach, so its own words reach the
// user.
func (d *decoder) tolerations(n *yaml.Node, path string) []api.Toleration {
	rv := resolve(n)
	if isNull(rv) {
		return nil
	}
	if rv.Kind != yaml.SequenceNode {
		d.add(rv.Line, path, "must be a list of {key, operator, value, effect, tolerationSeconds}, got %s", describe(rv))
		return nil
	}
	var out []api.Toleration
	for i, item := range rv.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		var t api.Toleration
		d.mapping(item, ip, tolerationFields, func(key string, v *yaml.Node, fp string) bool {
			switch key {
			case "key":
				t.Key, _ = d.str(v, fp)
			case "operator":
				t.Operator, _ = d.str(v, fp)
			case "value":
				t.Value, _ = d.str(v, fp)
			case "effect":
				t.Effect, _ = d.str(v, fp)
			case "tolerationSeconds":
				if s, ok := d.integer(v, fp); ok {
					secs := int64(s)
					t.TolerationSeconds = &secs
				}
			default:
				return false
			}
			return true
		})
		out = append(out, t)
	}
	return out
}

// checkKubernetes applies an attached Kubernetes cluster's rules.
func checkKubernetes(c *api.Compute, bad func(field, format string, args ...any)) {
	k := c.Kubernetes
	if c.MinInstances != 0 || c.MaxInstances != 0 || c.IdleTimeBeforeScaleDown != 0 || c.Size != "" {
		bad("type", "an attached Kubernetes cluster gives each job Pods of its instance type: size, min_instances, max_instances and idle_time_before_scale_down do not apply")
	}
	if c.SSHSettings != nil || c.SSHPublicAccessEnabled != nil || c.NetworkSettings != nil || c.Tide != nil || c.Instance != nil || c.VirtualMachine != nil {
		bad("type", "cluster, instance and machine fields (ssh_settings, network_settings, tide, address, ...) do not apply to an attached Kubernetes cluster")
	}
	if msgs := resourceNameProblems(k.Namespace); k.Namespace != "" && len(msgs) > 0 {
		bad("namespace", "%q is not a Kubernetes namespace name: %s", k.Namespace, strings.Join(msgs, "; "))
	}
	if k.Kubeconfig == "" && k.KubeconfigFile == "" && !k.HasKubeconfig {
		bad("kubeconfig_file", "required: the kubeconfig tide reaches the cluster with (a user or service account that may manage Pods and Secrets in namespace %s)", k.Namespace)
	}
	p := k.Properties
	if p == nil || len(p.InstanceTypes) == 0 {
		bad("properties.instanceTypes", "required: at least one instance type (or leave properties out for Azure's defaultinstancetype)")
		return
	}
	if _, ok := p.InstanceTypes[p.DefaultInstanceType]; !ok {
		bad("properties.defaultInstanceType", "%q is not one of the instance types (%s)", p.DefaultInstanceType, strings.Join(k.InstanceTypeNames(), ", "))
	}
	for _, name := range k.InstanceTypeNames() {
		it := p.InstanceTypes[name]
		fp := "properties.instanceTypes." + name
		if msgs := resourceNameProblems(name); len(msgs) > 0 {
			bad(fp, "%q is not a valid instance type name (a Kubernetes name: %s)", name, strings.Join(msgs, "; "))
		}
		for _, part := range []struct {
			name string
			list map[string]string
		}{{"requests", it.Resources.Requests}, {"limits", it.Resources.Limits}} {
			for res, q := range part.list {
				rp := fp + ".resources." + part.name + "." + res
				if !slices.Contains(instanceResourceNames, res) {
					bad(rp, "resource %q is not supported yet; an instance type sets %s", res, strings.Join(instanceResourceNames, ", "))
					continue
				}
				if _, err := resource.ParseQuantity(q); err != nil {
					bad(rp, "%q is not a Kubernetes quantity (e.g. 500m, 2, 4Gi): %v", q, err)
				}
			}
		}
		if _, ok := it.Resources.Requests["nvidia.com/gpu"]; ok {
			if it.Resources.Limits["nvidia.com/gpu"] != it.Resources.Requests["nvidia.com/gpu"] {
				bad(fp+".resources.limits.nvidia.com/gpu", "must equal requests' nvidia.com/gpu: Kubernetes does not overcommit GPUs")
			}
		}
	}
}

// resourceNameProblems checks a Kubernetes DNS label (namespaces, and
// instance type names, which Azure's extension makes resources of).
func resourceNameProblems(s string) []string {
	var out []string
	if len(s) > 63 {
		out = append(out, "at most 63 characters")
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			out = append(out, "only lowercase letters, digits and '-'")
			break
		}
	}
	if s == "" || strings.HasPrefix(s, "-") || strings.HasSuffix(s, "-") {
		out = append(out, "must start and end with a letter or digit")
	}
	return out
}

// KubernetesSize is the size of the Pods of instance type it, as tide
// counts nodes: the limits (else the requests) of cpu rounded up to whole
// vCPUs (at least 1), memory in GiB and nvidia.com/gpu.
func KubernetesSize(name string, it api.InstanceType) api.Size {
	get := func(res string) (resource.Quantity, bool) {
		for _, m := range []map[string]string{it.Resources.Limits, it.Resources.Requests} {
			if s, ok := m[res]; ok {
				if q, err := resource.ParseQuantity(s); err == nil {
					return q, true
				}
			}
		}
		return resource.Quantity{}, false
	}
	size := api.Size{Name: name, VCPUs: 1}
	if q, ok := get("cpu"); ok {
		size.VCPUs = max(1, int(math.Ceil(float64(q.MilliValue())/1000)))
	}
	if q, ok := get("memory"); ok {
		size.MemoryGB = math.Round(float64(q.Value())/(1<<30)*100) / 100
	}
	if q, ok := get("nvidia.com/gpu"); ok {
		size.GPUs = int(q.Value())
	}
	return size
}
