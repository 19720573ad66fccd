package spec

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

func (d *decoder) environment(n *yaml.Node, path string) *api.JobEnvironment {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		s, _ := d.str(n, path)
		return &api.JobEnvironment{Ref: s}
	}
	env := &api.JobEnvironment{}
	d.mapping(n, path, []string{"image", "build", "conda_file", "os_type"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "image":
			env.Image, _ = d.str(v, fp)
		case "conda_file":
			env.CondaFile, _ = d.str(v, fp)
		case "os_type":
			if s, ok := d.str(v, fp); ok && !strings.EqualFold(s, "linux") {
				d.add(d.lines[fp], fp, "%s is not supported; tide runs Linux environments", s)
			}
		case "build":
			env.Build = d.buildContext(v, fp)
		case "name", "version", "description", "tags", "inference_config":
			d.notSupported(fp, "not supported in an inline environment; register the environment or remove it")
		default:
			return false
		}
		return true
	})
	return env
}

func (d *decoder) resources(n *yaml.Node, path string) *api.JobResources {
	if isNull(n) {
		return nil
	}
	r := &api.JobResources{}
	d.mapping(n, path, []string{"instance_type", "instance_count", "shm_size"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "instance_type":
			r.InstanceType, _ = d.str(v, fp)
		case "instance_count":
			r.InstanceCount, _ = d.integer(v, fp)
			if r.InstanceCount < 1 && !isNull(v) {
				d.lineCheck(fp, "must be >= 1 (got %d)", r.InstanceCount)
			}
		case "shm_size":
			r.ShmSize, _ = d.str(v, fp)
		case "properties", "docker_args", "locations":
			d.notSupported(fp, "not supported yet; the compute's size (or a serverless job's instance_type) decides the node shape; remove it")
		default:
			return false
		}
		return true
	})
	return r
}

func (d *decoder) distribution(n *yaml.Node, path string) *api.Distribution {
	if isNull(n) {
		return nil
	}
	dist := &api.Distribution{}
	fields := map[string]string{} // field -> the distribution type it belongs to
	d.mapping(n, path, []string{"type", "process_count_per_instance", "worker_count", "parameter_server_count"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "type":
			s, _ := d.str(v, fp)
			dist.Type = strings.ToLower(s)
		case "process_count_per_instance":
			dist.ProcessCountPerInstance, _ = d.integer(v, fp)
			fields[key] = "pytorch or mpi"
		case "worker_count":
			dist.WorkerCount, _ = d.integer(v, fp)
			fields[key] = "tensorflow"
		case "parameter_server_count":
			dist.ParameterServerCount, _ = d.integer(v, fp)
			fields[key] = "tensorflow"
		default:
			return false
		}
		return true
	})
	for _, f := range sortedNames(fields) {
		if dist.Type != "" && slices.Contains(distTypes, dist.Type) && !strings.Contains(fields[f], dist.Type) {
			d.add(d.lines[path+"."+f], path+"."+f, "not a %s distribution field (it belongs to %s)", dist.Type, fields[f])
		}
	}
	return dist
}

// limits decodes a job's limits; a sweep's (sweep set) have the trial
// limits too.
func (d *decoder) limits(n *yaml.Node, path string, sweep bool) *api.JobLimits {
	if isNull(n) {
		return nil
	}
	l := &api.JobLimits{}
	known := []string{"timeout"}
	if sweep {
		known = append(known, "max_total_trials", "max_concurrent_trials", "trial_timeout")
	}
	d.mapping(n, path, known, func(key string, v *yaml.Node, fp string) bool {
		var field *int
		switch key {
		case "timeout":
			field = &l.Timeout
		case "max_total_trials":
			field = &l.MaxTotalTrials
		case "max_concurrent_trials":
			field = &l.MaxConcurrentTrials
		case "trial_timeout":
			field = &l.TrialTimeout
		default:
			return false
		}
		if key != "timeout" && !sweep {
			d.notSupported(fp, "belongs to sweep jobs; set type: sweep")
			return true
		}
		*field, _ = d.integer(v, fp)
		return true
	})
	return l
}

// jobIdentityTypes are the values of a job's identity.type.
var jobIdentityTypes = []string{"user_identity", "managed", "aml_token"}

// jobIdentity reads a job's `identity:` (whom its code acts as).
func (d *decoder) jobIdentity(n *yaml.Node, path string) *api.JobIdentity {
	if isNull(n) {
		return nil
	}
	id := &api.JobIdentity{}
	d.mapping(n, path, []string{"type", "client_id", "object_id", "resource_id"}, func(key string, v *yaml.Node, fp string) bool {
		s, _ := d.str(v, fp)
		switch key {
		case "type":
			id.Type = strings.ToLower(strings.TrimSpace(s))
			if !slices.Contains(jobIdentityTypes, id.Type) {
				d.add(resolve(v).Line, fp, "must be one of %s, got %q", strings.Join(jobIdentityTypes, ", "), s)
			}
		case "client_id":
			id.ClientID = s
		case "object_id":
			id.ObjectID = s
		case "resource_id":
			id.ResourceID = s
		default:
			return false
		}
		return true
	})
	if id.Type == "" {
		d.add(n.Line, path+".type", "required; one of %s", strings.Join(jobIdentityTypes, ", "))
	}
	if id.Type != "managed" && id.ClientID+id.ObjectID+id.ResourceID != "" {
		d.add(n.Line, path, "client_id, object_id and resource_id name a managed identity; they need type: managed")
	}
	return id
}

// buildContext reads an environment's build: its path (a folder holding a
// Dockerfile; the CLI uploads it) and Azure's dockerfile_path, which tide
// supports only as the context's own Dockerfile.
func (d *decoder) buildContext(v *yaml.Node, path string) *api.BuildContext {
	b := &api.BuildContext{}
	d.mapping(v, path, []string{"path", "dockerfile_path"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "path":
			b.Path, _ = d.str(v, fp)
		case "dockerfile_path":
			if s, ok := d.str(v, fp); ok && s != "Dockerfile" && s != "./Dockerfile" {
				d.notSupported(fp, "not supported yet: tide builds the context's own Dockerfile; rename "+s+" to Dockerfile in "+path+".path")
			}
		default:
			return false
		}
		return true
	})
	return b
}
