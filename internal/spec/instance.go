package spec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/schedule"
)

// instanceFields are the fields of Azure ML's computeInstance schema tide
// reads.
var instanceFields = []string{
	"$schema", "name", "type", "description", "tags", "location", "size",
	"ssh_public_access_enabled", "ssh_settings", "network_settings", "identity", "enable_node_public_ip",
	"idle_time_before_shutdown", "idle_time_before_shutdown_minutes", "schedules", "setup_scripts", "create_on_behalf_of",
}

// instanceUnsupported are Azure fields of an instance tide does not
// implement; each is refused by name.
var instanceUnsupported = map[string]string{
	"custom_applications":   "custom applications",
	"enable_sso":            "single sign-on",
	"enable_root_access":    "root access settings",
	"os_image_url":          "custom OS images",
	"release_quota_on_stop": "releasing quota on stop",
	"enable_os_patching":    "OS patching",
}

// instanceStatusFields are set by the server on an instance.
var instanceStatusFields = map[string]bool{
	"state": true, "last_operation": true, "applications": true, "setup": true, "node": true,
	"connection": true, "activity": true, "desired_state": true, "schedules_checked_on": true,
	"services": true, "os_image_metadata": true, "runtime": true,
}

// DefaultInstanceScriptTimeout is a setup script's timeout when it sets
// none, in minutes.
const DefaultInstanceScriptTimeout = 60

// parseInstance reads the fields of a computeinstance document into c.
func (d *decoder) parseInstance(root *yaml.Node, c *api.Compute) {
	in := &api.Instance{}
	c.Instance = in
	c.MinInstances, c.MaxInstances, c.Tier = 0, 1, api.TierDedicated
	d.mapping(root, "", instanceFields, func(key string, v *yaml.Node, fp string) bool {
		if d.commonComputeField(c, key, v, fp) {
			return true
		}
		switch key {
		case "location":
			c.Location, _ = d.str(v, fp)
		case "size":
			c.Size, _ = d.str(v, fp)
		case "ssh_public_access_enabled":
			if b, ok := d.boolean(v, fp); ok {
				c.SSHPublicAccessEnabled = &b
			}
		case "enable_node_public_ip":
			if b, ok := d.boolean(v, fp); ok {
				c.EnableNodePublicIP = &b
				if b {
					// tide's nodes have no public address: SSH and Jupyter
					// reach them through the tide server (false is what
					// tide always does).
					d.add(resolve(v).Line, fp, "true is not supported yet: tide gives nodes no public IP (SSH and Jupyter reach them through the server); remove it or set false")
				}
			}
		case "ssh_settings":
			c.SSHSettings = d.sshSettings(v, fp)
		case "network_settings":
			c.NetworkSettings = d.networkSettings(v, fp)
		case "identity":
			c.Identity = d.identity(v, fp)
		case "idle_time_before_shutdown":
			in.IdleTimeBeforeShutdown, _ = d.str(v, fp)
		case "idle_time_before_shutdown_minutes":
			in.IdleTimeBeforeShutdownMinutes, _ = d.integer(v, fp)
		case "schedules":
			in.Schedules = d.schedules(v, fp)
		case "setup_scripts":
			in.SetupScripts = d.setupScripts(v, fp)
		case "create_on_behalf_of":
			in.CreateOnBehalfOf = d.assignedUser(v, fp)
		case "min_instances", "max_instances", "idle_time_before_scale_down", "tier":
			// A whole api.Compute sent as JSON has the cluster fields with
			// an instance's values; other values do not apply.
			if v, ok := d.str(v, fp); ok && v != map[string]string{"min_instances": "0", "max_instances": "1", "idle_time_before_scale_down": "0", "tier": api.TierDedicated}[key] {
				d.add(d.lines[fp], fp, "does not apply to a compute instance (one node); remove it (idle shutdown is idle_time_before_shutdown_minutes)")
			}
		default:
			if what, ok := instanceUnsupported[key]; ok {
				d.notSupported(fp, what+" ("+key+") are not supported yet on a compute instance; remove the field")
				return true
			}
			if computeStatusFields[key] || instanceStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if c.Size == "" {
		c.Size = DefaultSize
	}
}

// schedules reads schedules.compute_start_stop.
func (d *decoder) schedules(n *yaml.Node, path string) *api.ComputeSchedules {
	if isNull(n) {
		return nil
	}
	s := &api.ComputeSchedules{}
	d.mapping(n, path, []string{"compute_start_stop"}, func(key string, v *yaml.Node, fp string) bool {
		if key != "compute_start_stop" {
			return false
		}
		s.ComputeStartStop = d.scheduleList(v, fp, true)
		return true
	})
	return s
}

// scheduleList reads a list of start/stop schedules: with an action on an
// instance, with min_instances/max_instances on a cluster.
func (d *decoder) scheduleList(n *yaml.Node, path string, instance bool) []api.StartStopSchedule {
	rn := resolve(n)
	if isNull(rn) {
		return nil
	}
	if rn.Kind != yaml.SequenceNode {
		d.add(rn.Line, path, "must be a list of schedules, got %s", describe(rn))
		return nil
	}
	fields := []string{"action", "state", "trigger", "min_instances", "max_instances"}
	if instance {
		fields = []string{"action", "state", "trigger"}
	}
	var out []api.StartStopSchedule
	for i, item := range rn.Content {
		ip := path + "[" + itoa(i) + "]"
		var s api.StartStopSchedule
		d.mapping(item, ip, fields, func(key string, v *yaml.Node, fp string) bool {
			switch key {
			case "action":
				if !instance {
					return false
				}
				if a, ok := d.str(v, fp); ok {
					s.Action = strings.ToLower(strings.TrimSpace(a))
				}
			case "state", "status":
				if st, ok := d.str(v, fp); ok {
					s.State = strings.ToLower(strings.TrimSpace(st))
				}
			case "trigger":
				s.Trigger = d.trigger(v, fp)
			case "min_instances", "max_instances":
				if instance {
					return false
				}
				if x, ok := d.integer(v, fp); ok {
					if key == "min_instances" {
						s.MinInstances = &x
					} else {
						s.MaxInstances = &x
					}
				}
			case "next_run", "id", "provisioning_status":
				d.readOnly(v, fp)
			default:
				return false
			}
			return true
		})
		if _, ok := d.lines[ip]; !ok {
			d.lines[ip] = resolve(item).Line
		}
		out = append(out, s)
	}
	return out
}

func (d *decoder) trigger(n *yaml.Node, path string) *api.Trigger {
	if isNull(n) {
		return nil
	}
	t := &api.Trigger{}
	d.mapping(n, path, []string{"type", "expression", "frequency", "interval", "schedule", "start_time", "time_zone"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "type":
			t.Type, _ = d.str(v, fp)
			t.Type = strings.ToLower(strings.TrimSpace(t.Type))
		case "expression":
			t.Expression, _ = d.str(v, fp)
		case "frequency":
			t.Frequency, _ = d.str(v, fp)
			t.Frequency = strings.ToLower(strings.TrimSpace(t.Frequency))
		case "interval":
			t.Interval, _ = d.integer(v, fp)
		case "start_time":
			t.StartTime, _ = d.str(v, fp)
		case "time_zone":
			t.TimeZone, _ = d.str(v, fp)
		case "schedule":
			t.Schedule = d.recurrenceSchedule(v, fp)
		default:
			return false
		}
		return true
	})
	return t
}

func (d *decoder) recurrenceSchedule(n *yaml.Node, path string) *api.RecurrenceSchedule {
	if isNull(n) {
		return nil
	}
	s := &api.RecurrenceSchedule{}
	ints := func(v *yaml.Node, fp string) []int {
		rv := resolve(v)
		if rv.Kind == yaml.ScalarNode && !isNull(rv) {
			x, _ := d.integer(rv, fp)
			return []int{x}
		}
		if rv.Kind != yaml.SequenceNode {
			d.add(rv.Line, fp, "must be a list of numbers, got %s", describe(rv))
			return nil
		}
		var out []int
		for i, e := range rv.Content {
			if x, ok := d.integer(e, fp+"["+itoa(i)+"]"); ok {
				out = append(out, x)
			}
		}
		return out
	}
	d.mapping(n, path, []string{"hours", "minutes", "week_days", "month_days"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "hours":
			s.Hours = ints(v, fp)
		case "minutes":
			s.Minutes = ints(v, fp)
		case "month_days":
			s.MonthDays = ints(v, fp)
		case "week_days":
			rv := resolve(v)
			if rv.Kind != yaml.SequenceNode {
				if w, ok := d.str(rv, fp); ok {
					s.WeekDays = []string{w}
				}
				return true
			}
			for i, e := range rv.Content {
				if w, ok := d.str(e, fp+"["+itoa(i)+"]"); ok {
					s.WeekDays = append(s.WeekDays, w)
				}
			}
		default:
			return false
		}
		return true
	})
	return s
}

func (d *decoder) setupScripts(n *yaml.Node, path string) *api.SetupScripts {
	if isNull(n) {
		return nil
	}
	s := &api.SetupScripts{}
	d.mapping(n, path, []string{"creation_script", "startup_script"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "creation_script":
			s.CreationScript = d.setupScript(v, fp)
		case "startup_script":
			s.StartupScript = d.setupScript(v, fp)
		default:
			return false
		}
		return true
	})
	return s
}

func (d *decoder) setupScript(n *yaml.Node, path string) *api.SetupScript {
	if isNull(n) {
		return nil
	}
	s := &api.SetupScript{}
	d.mapping(n, path, []string{"path", "command", "timeout_minutes", "content"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "path":
			s.Path, _ = d.str(v, fp)
		case "command":
			s.Command, _ = d.str(v, fp)
		case "timeout_minutes":
			s.TimeoutMinutes, _ = d.integer(v, fp)
		case "content":
			s.Content, _ = d.str(v, fp)
		default:
			return false
		}
		return true
	})
	return s
}

func (d *decoder) assignedUser(n *yaml.Node, path string) *api.AssignedUser {
	if isNull(n) {
		return nil
	}
	u := &api.AssignedUser{}
	d.mapping(n, path, []string{"user_tenant_id", "user_object_id"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "user_tenant_id":
			u.UserTenantID, _ = d.str(v, fp)
		case "user_object_id":
			u.UserObjectID, _ = d.str(v, fp)
		default:
			return false
		}
		return true
	})
	return u
}

// isoDuration matches the ISO 8601 durations Azure writes for
// idle_time_before_shutdown ("PT30M", "PT1H30M", "P1DT2H").
var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$`)

// ParseISODuration parses an ISO 8601 duration of days, hours, minutes
// and seconds.
func ParseISODuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(strings.ToUpper(strings.TrimSpace(s)))
	if m == nil || s == "P" || strings.HasSuffix(strings.ToUpper(s), "T") {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration; write e.g. PT30M (30 minutes) or PT2H", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] != "" {
			n, _ := strconv.Atoi(m[i+1])
			d += time.Duration(n) * unit
		}
	}
	return d, nil
}

// IdleShutdown returns how long an instance may stay idle before it stops
// (0: never): idle_time_before_shutdown_minutes, else
// idle_time_before_shutdown.
func IdleShutdown(in *api.Instance) time.Duration {
	if in == nil {
		return 0
	}
	if in.IdleTimeBeforeShutdownMinutes > 0 {
		return time.Duration(in.IdleTimeBeforeShutdownMinutes) * time.Minute
	}
	d, _ := ParseISODuration(in.IdleTimeBeforeShutdown)
	return d
}

// checkInstance applies the rules of a compute instance.
func checkInstance(c *api.Compute, bad func(field, format string, args ...any)) {
	in := c.Instance
	if in == nil {
		return
	}
	if c.MinInstances != 0 || c.MaxInstances != 1 || c.IdleTimeBeforeScaleDown != 0 {
		bad("type", "a compute instance is one node: min_instances, max_instances and idle_time_before_scale_down do not apply (use idle_time_before_shutdown_minutes)")
	}
	if in.IdleTimeBeforeShutdown != "" {
		if _, err := ParseISODuration(in.IdleTimeBeforeShutdown); err != nil {
			bad("idle_time_before_shutdown", "%v", err)
		}
		if in.IdleTimeBeforeShutdownMinutes != 0 {
			bad("idle_time_before_shutdown", "set idle_time_before_shutdown or idle_time_before_shutdown_minutes, not both")
		}
	}
	if in.IdleTimeBeforeShutdownMinutes < 0 {
		bad("idle_time_before_shutdown_minutes", "must be >= 0 (0: never shut down when idle; got %d)", in.IdleTimeBeforeShutdownMinutes)
	}
	if s := c.SSHSettings; s != nil && (s.AdminUsername != "" || s.AdminPassword != "") {
		bad("ssh_settings", "a compute instance takes only ssh_settings.ssh_key_value (admin_username and admin_password are for clusters)")
	}
	if ss := in.SetupScripts; ss != nil {
		checkScript(ss.CreationScript, "setup_scripts.creation_script", bad)
		checkScript(ss.StartupScript, "setup_scripts.startup_script", bad)
	}
	if u := in.CreateOnBehalfOf; u != nil && (strings.TrimSpace(u.UserObjectID) == "" || strings.TrimSpace(u.UserTenantID) == "") {
		bad("create_on_behalf_of", "set both user_tenant_id and user_object_id")
	}
	if in.Schedules != nil {
		checkSchedules(in.Schedules.ComputeStartStop, "schedules.compute_start_stop", true, bad)
	}
}

func checkScript(s *api.SetupScript, field string, bad func(field, format string, args ...any)) {
	if s == nil {
		return
	}
	switch {
	case s.Path == "" && s.Command == "":
		bad(field, "set path (a script file) or command")
	case s.Path != "" && s.Command != "":
		bad(field, "set path or command, not both")
	}
	if s.TimeoutMinutes < 0 {
		bad(field+".timeout_minutes", "must be >= 0 (got %d)", s.TimeoutMinutes)
	}
}

// checkSchedules checks start/stop schedules: each trigger compiles, an
// instance's action is start or stop, a cluster's sets a node count.
func checkSchedules(list []api.StartStopSchedule, path string, instance bool, bad func(field, format string, args ...any)) {
	for i, s := range list {
		p := path + "[" + itoa(i) + "]"
		if instance {
			switch s.Action {
			case "start", "stop":
			case "":
				bad(p+".action", "required; start or stop")
			default:
				bad(p+".action", "must be start or stop, got %q", s.Action)
			}
		} else {
			if s.MinInstances == nil && s.MaxInstances == nil {
				bad(p, "set min_instances and/or max_instances: what the schedule sets")
			}
			if s.MinInstances != nil && *s.MinInstances < 0 {
				bad(p+".min_instances", "must be >= 0 (got %d)", *s.MinInstances)
			}
			if s.MaxInstances != nil && *s.MaxInstances < 0 {
				bad(p+".max_instances", "must be >= 0 (0 pauses the cluster; got %d)", *s.MaxInstances)
			}
		}
		switch s.State {
		case "", "enabled", "disabled":
		default:
			bad(p+".state", "must be enabled or disabled, got %q", s.State)
		}
		if s.Trigger == nil {
			bad(p+".trigger", "required: {type: cron, expression: \"0 18 * * *\", time_zone: ...} or a recurrence")
			continue
		}
		if _, err := schedule.Compile(*s.Trigger); err != nil {
			if fe, ok := err.(*schedule.FieldError); ok {
				bad(p+".trigger."+fe.Field, "%s", fe.Message)
			} else {
				bad(p+".trigger", "%v", err)
			}
		}
	}
}
