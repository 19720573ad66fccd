package spec

import (
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// Azure's instance files parse unchanged, with Azure's defaults.
func TestInstanceExamples(t *testing.T) {
	for file, name := range map[string]string{
		"instance-basic.yml": "basic-example-i", "instance-minimal.yml": "minimal-example-i", "instance-schedule.yml": "schedule-example-i",
	} {
		c, err := ParseCompute(file, readExample(t, "resources/compute/"+file), nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if c.Name != name || !c.IsInstance() || c.MaxInstances != 1 || c.MinInstances != 0 {
			t.Fatalf("%s: got %+v", file, c)
		}
		if err := ValidateCompute(c, Env{}); err != nil {
			t.Fatalf("%s: ValidateCompute: %v", file, err)
		}
		if c.Size != "Standard_DS3_v2" {
			t.Errorf("%s: size %q", file, c.Size)
		}
	}
	c, _ := ParseCompute("s.yml", readExample(t, "resources/compute/instance-schedule.yml"), nil)
	s := c.Schedules.ComputeStartStop
	if len(s) != 1 || s[0].Action != "stop" || s[0].Trigger.Type != "cron" || s[0].Trigger.Expression != "0 18 * * *" ||
		s[0].Trigger.TimeZone != "Pacific Standard Time" || s[0].Trigger.StartTime != "2021-03-10T21:21:07" {
		t.Fatalf("schedule: %+v %+v", s, s[0].Trigger)
	}
}

func TestInstanceFields(t *testing.T) {
	yml := `
name: ci-alice
type: computeinstance
size: Standard_DS3_v2
description: alice's box
tags: {team: ml}
idle_time_before_shutdown_minutes: 30
ssh_public_access_enabled: true
ssh_settings:
  ssh_key_value: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINgSN2E/jyroLrZU1cZ/2og4GNMyhMFeXhn2eK22zESf alice@laptop
create_on_behalf_of:
  user_tenant_id: t1
  user_object_id: o1
network_settings: {vnet_name: v}
enable_node_public_ip: false
setup_scripts:
  creation_script: {path: setup.sh, timeout_minutes: 5}
  startup_script: {command: echo hi}
schedules:
  compute_start_stop:
    - action: start
      state: enabled
      trigger:
        type: recurrence
        frequency: week
        interval: 1
        time_zone: W. Europe Standard Time
        schedule: {hours: [8], minutes: [0], week_days: [monday, tuesday]}
    - action: stop
      trigger: {type: cron, expression: "0 20 * * *", time_zone: Europe/Berlin}
`
	c, err := ParseCompute("ci.yml", []byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	if IdleShutdown(c.Instance) != 30*time.Minute || c.SetupScripts.CreationScript.Path != "setup.sh" ||
		c.SetupScripts.StartupScript.Command != "echo hi" || c.CreateOnBehalfOf.UserObjectID != "o1" ||
		len(c.Schedules.ComputeStartStop) != 2 || c.Schedules.ComputeStartStop[0].Trigger.Schedule.WeekDays[1] != "tuesday" {
		t.Fatalf("got %+v", c.Instance)
	}
	iso, err := ParseCompute("ci.yml", []byte("name: ci-b\ntype: computeinstance\nidle_time_before_shutdown: PT1H30M\n"), nil)
	if err != nil || IdleShutdown(iso.Instance) != 90*time.Minute {
		t.Fatalf("ISO idle time: %v %v", err, iso)
	}
}

func TestInstanceErrors(t *testing.T) {
	for name, tt := range map[string]struct{ yml, want string }{
		"unknown time zone": {"schedules:\n  compute_start_stop:\n    - action: stop\n      trigger: {type: cron, expression: '0 18 * * *', time_zone: Mars Standard Time}\n",
			`ci.yml:6: schedules.compute_start_stop[0].trigger.time_zone: unknown time zone "Mars Standard Time"`},
		"invalid cron": {"schedules:\n  compute_start_stop:\n    - action: stop\n      trigger: {type: cron, expression: '0 25 * * *'}\n",
			`schedules.compute_start_stop[0].trigger.expression: cron hour field "25"`},
		"missing action": {"schedules:\n  compute_start_stop:\n    - trigger: {type: cron, expression: '0 18 * * *'}\n",
			`schedules.compute_start_stop[0].action: required; start or stop`},
		"bad action": {"schedules:\n  compute_start_stop:\n    - action: reboot\n      trigger: {type: cron, expression: '0 18 * * *'}\n",
			`action: must be start or stop, got "reboot"`},
		"no trigger":     {"schedules:\n  compute_start_stop:\n    - action: stop\n", `trigger: required`},
		"bad idle":       {"idle_time_before_shutdown: 30 minutes\n", `idle_time_before_shutdown: "30 minutes" is not an ISO 8601 duration`},
		"script neither": {"setup_scripts:\n  creation_script: {timeout_minutes: 3}\n", `setup_scripts.creation_script: set path (a script file) or command`},
		"unsupported":    {"enable_sso: true\n", `enable_sso: single sign-on (enable_sso) are not supported yet`},
		"min_instances":  {"min_instances: 1\n", `min_instances: does not apply to a compute instance`},
		"admin user":     {"ssh_settings: {admin_username: azureuser, admin_password: x}\n", `a compute instance takes only ssh_settings.ssh_key_value`},
		"not a key":      {"ssh_settings: {ssh_key_value: my-laptop-key}\n", `ssh_settings.ssh_key_value: line 1 is not an SSH public key`},
		"private key":    {"ssh_settings:\n  ssh_key_value: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    b3BlbnNzaC1rZXktdjEAAAAA\n", `ssh_settings.ssh_key_value: line 1 is a private key`},
	} {
		_, err := ParseCompute("ci.yml", []byte("name: ci-x\ntype: computeinstance\n"+tt.yml), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", name, err, tt.want)
		}
	}
}

// Clusters take max_instances: 0 (paused) and schedules under tide.
func TestClusterSchedules(t *testing.T) {
	c, err := ParseCompute("c.yml", []byte(`name: cpu
type: amlcompute
max_instances: 0
tide:
  schedules:
    - trigger: {type: cron, expression: "0 8 * * 1-5", time_zone: Eastern Standard Time}
      max_instances: 4
    - trigger: {type: cron, expression: "0 20 * * *", time_zone: Eastern Standard Time}
      max_instances: 0
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInstances != 0 || len(c.Tide.Schedules) != 2 || *c.Tide.Schedules[0].MaxInstances != 4 {
		t.Fatalf("got %+v", c.Tide)
	}
	_, err = ParseCompute("c.yml", []byte("name: cpu\ntype: amlcompute\ntide:\n  schedules:\n    - trigger: {type: cron, expression: '0 8 * * *'}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "set min_instances and/or max_instances") {
		t.Fatalf("schedule without counts: %v", err)
	}
	_, err = ParseCompute("c.yml", []byte("name: cpu\ntype: amlcompute\ntide:\n  schedules:\n    - action: stop\n      max_instances: 0\n      trigger: {type: cron, expression: '0 8 * * *'}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), `unknown field "action"`) {
		t.Fatalf("action on a cluster: %v", err)
	}
	_ = api.ComputeTypeInstance
}
