package spec

import (
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

// Azure's job tiers (queue_settings.job_tier), lower case as in YAML.
var jobTiers = []string{"null", "spot", "basic", "standard", "premium"}

// queueSettings decodes Azure's queue_settings block.
func (d *decoder) queueSettings(n *yaml.Node, path string) *api.QueueSettings {
	if isNull(n) {
		return nil
	}
	q := &api.QueueSettings{}
	d.mapping(n, path, []string{"job_tier", "priority"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "job_tier":
			q.JobTier, _ = d.str(v, fp)
		case "priority":
			// A number or a name; keep it as written.
			if s, ok := d.str(v, fp); ok {
				q.Priority = s
			}
		default:
			return false
		}
		return true
	})
	return q
}

// extensions decodes tide's own block, `tide:`.
func (d *decoder) extensions(n *yaml.Node, path string) *api.JobExtensions {
	if isNull(n) {
		return nil
	}
	x := &api.JobExtensions{}
	d.mapping(n, path, []string{"retries"}, func(key string, v *yaml.Node, fp string) bool {
		if key != "retries" {
			return false
		}
		r := &api.JobRetries{}
		d.mapping(v, fp, []string{"on_node_failure", "on_exit_code"}, func(key string, v *yaml.Node, fp string) bool {
			n, ok := d.integer(v, fp)
			switch key {
			case "on_node_failure":
				if ok {
					r.OnNodeFailure = &n
				}
			case "on_exit_code":
				if ok {
					r.OnExitCode = &n
				}
			default:
				return false
			}
			return true
		})
		x.Retries = r
		return true
	})
	return x
}

// checkQueue validates queue_settings and tide's retries, for files and API
// bodies alike.
func checkQueue(j *api.Job, bad func(field, format string, args ...any)) {
	if q := j.QueueSettings; q != nil {
		if _, err := api.ParsePriority(q.Priority); err != nil {
			bad("queue_settings.priority", "%v", err)
		}
		if q.JobTier != "" && !slices.Contains(jobTiers, strings.ToLower(q.JobTier)) {
			bad("queue_settings.job_tier", "must be one of %s, got %q", strings.Join(jobTiers, ", "), q.JobTier)
		}
	}
	if j.Tide == nil || j.Tide.Retries == nil {
		return
	}
	for field, v := range map[string]*int{"on_node_failure": j.Tide.Retries.OnNodeFailure, "on_exit_code": j.Tide.Retries.OnExitCode} {
		if v != nil && (*v < 0 || *v > api.MaxRetries) {
			bad("tide.retries."+field, "want a whole number from 0 to %d (got %s)", api.MaxRetries, strconv.Itoa(*v))
		}
	}
}
