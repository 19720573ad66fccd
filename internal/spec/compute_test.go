package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

const examples = "/work/shared/data/azureml-examples/cli"

func readExample(t testing.TB, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examples, rel))
	if err != nil {
		t.Skipf("example files not available: %v", err)
	}
	return data
}

func TestComputeExamples(t *testing.T) {
	tests := []struct {
		file    string
		wantErr string // empty: parses and validates
		name    string
		max     int
		tier    string
	}{
		{"cluster-basic.yml", "", "basic-example", 2, api.TierDedicated},
		{"cluster-location.yml", "", "location-example", 2, api.TierDedicated},
		{"cluster-low-priority.yml", "", "low-pri-example", 2, api.TierLowPriority},
		{"cluster-minimal.yml", "", "minimal-example", 1, api.TierDedicated},
		{"cluster-ssh-password.yml", "", "ssh-example", 2, api.TierDedicated},
		{"cluster-system-identity.yml", "", "basic-example", 2, api.TierDedicated},
		{"cluster-user-identity.yml", "", "basic-example", 2, api.TierDedicated},
		{"instance-basic.yml", "", "", 0, ""},
		{"instance-minimal.yml", "", "", 0, ""},
		{"instance-schedule.yml", "", "", 0, ""},
		{"vm-attach.yml", "vm-attach.yml:7: ssh_settings.admin_password: password logins are not supported yet: tide logs in to an attached machine with a key; set ssh_private_key_file (and add its public key to the machine's authorized_keys) and remove admin_password", "", 0, ""},
		{"attached-spark.yml", "attached-spark.yml:4: type: synapsespark is not supported yet; tide supports type: amlcompute, computeinstance, virtualmachine and kubernetes", "", 0, ""},
		{"attached-spark-system-identity.yml", "attached-spark-system-identity.yml:4: type: synapsespark is not supported yet; tide supports type: amlcompute, computeinstance, virtualmachine and kubernetes", "", 0, ""},
		{"attached-spark-user-identity.yml", "attached-spark-user-identity.yml:4: type: synapsespark is not supported yet; tide supports type: amlcompute, computeinstance, virtualmachine and kubernetes", "", 0, ""},
	}
	entries, err := os.ReadDir(filepath.Join(examples, "resources/compute"))
	if err != nil {
		t.Skipf("example files not available: %v", err)
	}
	if len(entries) != len(tests) {
		t.Errorf("the example folder has %d files, the table %d: add the new ones", len(entries), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := ParseCompute(tt.file, readExample(t, "resources/compute/"+tt.file), nil)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.IsInstance() {
				return // TestInstanceExamples checks them
			}
			if c.Name != tt.name || c.MaxInstances != tt.max || c.Tier != tt.tier || c.Type != api.ComputeTypeAmlCompute {
				t.Errorf("got %+v", c)
			}
			if err := ValidateCompute(c, Env{}); err != nil {
				t.Fatalf("ValidateCompute: %v", err)
			}
			if c.Size != "Standard_DS3_v2" {
				t.Errorf("size = %q, want the catalog's spelling Standard_DS3_v2", c.Size)
			}
		})
	}
}

func TestComputeDefaults(t *testing.T) {
	c, err := ParseCompute("c.yml", []byte("name: abc\ntype: amlcompute\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := api.Compute{Name: "abc", Type: "amlcompute", Size: DefaultSize, Tier: api.TierDedicated, MinInstances: 0, MaxInstances: 1, IdleTimeBeforeScaleDown: 120}
	if c.Name != want.Name || c.Size != want.Size || c.Tier != want.Tier || c.MinInstances != 0 || c.MaxInstances != 1 || c.IdleTimeBeforeScaleDown != 120 || c.Location != "" {
		t.Errorf("got %+v", c)
	}
}

func TestComputeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		sets []string
		want string // the whole Error(), one problem per line
	}{
		{"min greater than max", "name: abc\ntype: amlcompute\nmin_instances: 2\nmax_instances: 1\n", nil,
			"c.yml:4: max_instances: must be >= min_instances (got 1 < 2)"},
		{"typo suggests the field", "name: abc\ntype: amlcompute\nmax_instance: 3\n", nil,
			`c.yml:3: unknown field "max_instance"; did you mean "max_instances"?`},
		{"nested typo", "name: abc\ntype: amlcompute\nssh_settings:\n  admin_user: x\n  admin_password: y\n", nil,
			"c.yml:4: ssh_settings: unknown field \"admin_user\"; did you mean \"admin_username\"?"},
		{"wrong type", "name: abc\ntype: amlcompute\nmax_instances: two\n", nil,
			`c.yml:3: max_instances: must be an integer, got "two"`},
		{"float", "name: abc\ntype: amlcompute\nidle_time_before_scale_down: 2.5\n", nil,
			`c.yml:3: idle_time_before_scale_down: must be an integer, got 2.5`},
		{"read-only", "name: abc\ntype: amlcompute\nprovisioning_state: Succeeded\ncurrent_node_count: 0\n", nil,
			"c.yml:3: provisioning_state: read-only; set by the server (remove it from the file)"},
		{"all problems at once", "name: 1abc\ntype: amlcompute\ntier: spot\nmin_instances: -1\nmax_instances: 0\n", nil,
			"c.yml:1: name: \"1abc\" must start with a letter\nc.yml:3: tier: must be dedicated or low_priority, got \"spot\"\nc.yml:4: min_instances: must be >= 0 (got -1)"},
		{"missing type", "name: abc\n", nil, "c.yml: type: required; set type: amlcompute"},
		{"unknown type", "name: abc\ntype: bigcluster\n", nil, `c.yml:2: type: "bigcluster" is not a compute type; tide supports type: amlcompute, computeinstance, virtualmachine and kubernetes`},
		{"kubernetes without a kubeconfig", "name: abc\ntype: Kubernetes\n", nil, `c.yml: kubeconfig_file: required: the kubeconfig tide reaches the cluster with (a user or service account that may manage Pods and Secrets in namespace default)`},
		{"duplicate key", "name: abc\ntype: amlcompute\nname: abd\n", nil, "c.yml:3: name: defined twice (first on line 1); keep one"},
		{"syntax", "name: abc\ntype: [amlcompute\n", nil, "c.yml:1: invalid YAML: did not find expected ',' or ']'"},
		{"not a mapping", "- a\n- b\n", nil, "c.yml:1: the top level must be a mapping of fields (got a list)"},
		{"empty", "", nil, "c.yml: the file is empty; it must be a mapping of fields such as name: and type:"},
		{"tags must be scalars", "name: abc\ntype: amlcompute\ntags:\n  a: [1]\n", nil, "c.yml:4: tags.a: must be a string, number or boolean, got a list"},
		{"subnet", "name: abc\ntype: amlcompute\nnetwork_settings: {vnet_name: v, subnet: s}\n", nil,
			"c.yml:3: network_settings.subnet: not supported yet: tide's nodes join the Docker network vnet_name names, which has no subnets; remove subnet"},
		{"public ip", "name: abc\ntype: amlcompute\nenable_node_public_ip: true\n", nil,
			"c.yml:3: enable_node_public_ip: true is not supported yet: tide gives nodes no public IP (SSH and Jupyter reach them through the server); remove it or set false"},
		{"identity", "name: abc\ntype: amlcompute\nidentity:\n  type: user_assigned\n", nil,
			"c.yml:3: identity.user_assigned_identities: required when identity.type is user_assigned; list {resource_id: ...}"},
		{"bad set value", "name: abc\ntype: amlcompute\n", []string{"max_instances=two"}, `--set: max_instances: must be an integer, got "two"`},
		{"bad set syntax", "name: abc\ntype: amlcompute\n", []string{"max_instances"}, `--set: "max_instances": want path=value, e.g. max_instances=3 or tags.team=ml`},
		{"set through a scalar", "name: abc\ntype: amlcompute\n", []string{"name.x=1"}, `--set: "name.x=1": name is not a mapping (it is "abc")`},
		{"tide extensions", "name: abc\ntype: amlcompute\ntide:\n  scale_down_policy: eager\n  max_starting_nodes: -1\n", nil,
			"c.yml:5: tide.max_starting_nodes: must be >= 0 (0: no cap; got -1)\nc.yml:4: tide.scale_down_policy: must be fixed or adaptive (got \"eager\")"},
		{"two documents", "name: abc\ntype: amlcompute\n---\nname: b\n", nil, "c.yml:3: the file holds more than one YAML document (---); put one resource per file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCompute("c.yml", []byte(tt.yaml), tt.sets)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", err, tt.want)
			}
			if AsErrors(err) == nil {
				t.Errorf("error is not an Errors: %T", err)
			}
		})
	}
}

func TestComputeSets(t *testing.T) {
	c, err := ParseCompute("c.yml", []byte("name: abc\ntype: amlcompute\nmax_instances: 2\ntags:\n  a: b\n"),
		[]string{"max_instances=3", "tags.team=ml", "tags.n=42", "ssh_public_access_enabled=false", "description=a: b", "network_settings.vnet_name=v1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInstances != 3 || c.Tags["team"] != "ml" || c.Tags["a"] != "b" || c.Tags["n"] != "42" ||
		c.SSHPublicAccessEnabled == nil || *c.SSHPublicAccessEnabled || c.Description != "a: b" ||
		c.NetworkSettings == nil || c.NetworkSettings.VnetName != "v1" {
		t.Errorf("got %+v", c)
	}
	c, err = ParseCompute("c.yml", nil, []string{"name=from-set", "type=amlcompute"})
	if err != nil || c.Name != "from-set" {
		t.Fatalf("sets on an empty document: %+v, %v", c, err)
	}
}

func TestComputeJSONBody(t *testing.T) {
	// The server feeds request bodies through the same parser; a marshalled
	// api.Compute carries zero status fields, which are ignored.
	body := `{"name":"abc","type":"AmlCompute","location":"","size":"standard_ds3_v2","tier":"LowPriority","min_instances":0,"max_instances":4,"idle_time_before_scale_down":60,"current_node_count":0,"target_node_count":0,"node_state_counts":{"idle":0,"running":0,"preparing":0,"unusable":0,"leaving":0,"preempted":0}}`
	c, err := ParseCompute("", []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != "amlcompute" || c.Tier != api.TierLowPriority || c.MaxInstances != 4 || c.IdleTimeBeforeScaleDown != 60 {
		t.Errorf("got %+v", c)
	}
	_, err = ParseCompute("", []byte(`{"name":"abc","type":"amlcompute","current_node_count":3}`), nil)
	if err == nil || err.Error() != "line 1: current_node_count: read-only; set by the server (remove it from the file)" {
		t.Errorf("got %v", err)
	}
}

func TestComputeNameRule(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"abc", true},
		{"cpu-cluster", true},
		{"gpu-a100-x", true},
		{"a1-b2c", true},
		{"ab", false},
		{"abcdefghijklmnopqrstuvwxy", false}, // 25
		{"abcdefghijklmnopqrstuvwx", true},   // 24
		{"1abc", false},
		{"cpu_cluster", false},
		{"cpu-", false},
		{"cpu-123", false},
		{"cpu-1-a", true},
		{"-abc", false},
	}
	for _, tt := range tests {
		if got := computeNameProblem(tt.name) == ""; got != tt.ok {
			t.Errorf("%q: ok = %v, want %v (%s)", tt.name, got, tt.ok, computeNameProblem(tt.name))
		}
	}
}

func TestValidateCompute(t *testing.T) {
	base := func() *api.Compute {
		return &api.Compute{Name: "abc", Type: "amlcompute", Size: "STANDARD_DS3_v2", Tier: api.TierDedicated, MaxInstances: 2, IdleTimeBeforeScaleDown: 120}
	}
	env := Env{Locations: []string{"local", "Docker"}}
	tests := []struct {
		name    string
		mutate  func(c *api.Compute)
		want    string
		size    string
		loc     string
		envOver *Env
	}{
		{"ok, canonical size", func(c *api.Compute) {}, "", "Standard_DS3_v2", "", nil},
		{"location rewritten", func(c *api.Compute) { c.Location = "docker" }, "", "Standard_DS3_v2", "Docker", nil},
		{"unknown location", func(c *api.Compute) { c.Location = "westus" }, `location: unknown location "westus"; known locations: local, Docker`, "", "", nil},
		{"any location offline", func(c *api.Compute) { c.Location = "westus" }, "", "Standard_DS3_v2", "westus", &Env{}},
		{"unknown size", func(c *api.Compute) { c.Size = "STANDARD_XYZ" }, `size: unknown VM size "STANDARD_XYZ"; run 'tide compute list-sizes'`, "", "", nil},
		{"size typo", func(c *api.Compute) { c.Size = "Standard_DS3_v3" }, `size: unknown VM size "Standard_DS3_v3"; did you mean Standard_DS3_v2? run 'tide compute list-sizes'`, "", "", nil},
		{"low priority not capable", func(c *api.Compute) { c.Size = "Standard_ND96isr_H100_v5"; c.Tier = "LowPriority" },
			"tier: Standard_ND96isr_H100_v5 cannot run as low_priority; use tier: dedicated or a low-priority-capable size", "", "", nil},
		{"name required", func(c *api.Compute) { c.Name = "" }, "name: required; 3-24 letters, digits and '-', starting with a letter", "", "", nil},
		{"min max from a patch", func(c *api.Compute) { c.MinInstances = 3 }, "max_instances: must be >= min_instances (got 2 < 3)", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(c)
			e := env
			if tt.envOver != nil {
				e = *tt.envOver
			}
			err := ValidateCompute(c, e)
			if tt.want != "" {
				if err == nil || err.Error() != tt.want {
					t.Fatalf("got %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Size != tt.size || c.Location != tt.loc {
				t.Errorf("size, location = %q, %q; want %q, %q", c.Size, c.Location, tt.size, tt.loc)
			}
		})
	}
}

func TestCheckComputeUpdate(t *testing.T) {
	old := &api.Compute{Name: "abc", Type: "amlcompute", Size: "Standard_DS3_v2", Tier: api.TierDedicated, Location: "local",
		MaxInstances: 2, SSHSettings: &api.SSHSettings{AdminUsername: "u", AdminPassword: "p"}}
	tests := []struct {
		name   string
		mutate func(c *api.Compute)
		want   string
	}{
		{"same", func(c *api.Compute) {}, ""},
		{"scaling is fine", func(c *api.Compute) { c.MaxInstances = 10; c.MinInstances = 1; c.Description = "x" }, ""},
		{"size casing is the same size", func(c *api.Compute) { c.Size = "STANDARD_DS3_V2" }, ""},
		{"empty location means unchanged", func(c *api.Compute) { c.Location = "" }, ""},
		{"size", func(c *api.Compute) { c.Size = "Standard_DS4_v2" }, "size: cannot change after creation (Standard_DS3_v2 -> Standard_DS4_v2); delete and recreate the compute"},
		{"tier", func(c *api.Compute) { c.Tier = api.TierLowPriority }, "tier: cannot change after creation (dedicated -> low_priority); delete and recreate the compute"},
		{"location", func(c *api.Compute) { c.Location = "docker" }, "location: cannot change after creation (local -> docker); delete and recreate the compute"},
		{"ssh", func(c *api.Compute) { c.SSHSettings = &api.SSHSettings{AdminUsername: "u", AdminPassword: "other"} }, "ssh_settings: cannot change after creation; delete and recreate the compute"},
		{"network", func(c *api.Compute) { c.NetworkSettings = &api.NetworkSettings{VnetName: "v"} }, "network_settings: cannot change after creation; delete and recreate the compute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := *old
			s := *old.SSHSettings
			u.SSHSettings = &s
			tt.mutate(&u)
			err := CheckComputeUpdate(old, &u)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "other") {
				t.Fatal("secret in the message")
			}
		})
	}
}

func TestParseComputePatch(t *testing.T) {
	p, err := ParseComputePatch("", []byte(`{"max_instances": 5, "min_instances": 1, "tags": {"a": 1}, "description": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if *p.MaxInstances != 5 || *p.MinInstances != 1 || (*p.Tags)["a"] != "1" || p.Description == nil || *p.Description != "" || p.IdleTimeBeforeScaleDown != nil {
		t.Errorf("got %+v", p)
	}
	tests := []struct {
		body string
		want string
	}{
		{`{"size": "Standard_DS4_v2"}`, "line 1: size: cannot change after creation; delete and recreate the compute"},
		{"max_instances: 1\nmin_instances: 2\n", "line 1: max_instances: must be >= min_instances (got 1 < 2)"},
		{"max_instance: 1\n", `line 1: unknown field "max_instance"; did you mean "max_instances"?`},
		{"idle_time_before_scale_down: -5\n", "line 1: idle_time_before_scale_down: must be >= 0 seconds (got -5)"},
		{"max_instances: null\n", "line 1: max_instances: must be an integer, got null"},
		{"etag: abc\n", "line 1: etag: read-only; set by the server (remove it from the file)"},
	}
	for _, tt := range tests {
		_, err := ParseComputePatch("", []byte(tt.body))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: got %v, want %q", tt.body, err, tt.want)
		}
	}
}

func TestFieldErrorFormat(t *testing.T) {
	tests := []struct {
		e    FieldError
		want string
	}{
		{FieldError{File: "cluster.yml", Line: 7, Field: "max_instances", Message: "must be >= min_instances (got 1 < 2)"}, "cluster.yml:7: max_instances: must be >= min_instances (got 1 < 2)"},
		{FieldError{File: "cluster.yml", Field: "type", Message: "required"}, "cluster.yml: type: required"},
		{FieldError{Field: "type", Message: "required"}, "type: required"},
		{FieldError{Line: 3, Message: "invalid YAML"}, "line 3: invalid YAML"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func FuzzParseCompute(f *testing.F) {
	dir := filepath.Join(examples, "resources/compute")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
			f.Add(data, "max_instances=3")
		}
	}
	f.Add([]byte("name: abc\ntype: amlcompute\nidentity: &a {type: none}\nnetwork_settings: *a\n"), "tags.a.b=1")
	f.Add([]byte(`{"name":"abc","type":"amlcompute","max_instances":"4"}`), "=")
	f.Add([]byte(vmFile), "address=[::1]:22")
	f.Add([]byte(k8sFile), "properties.instanceTypes.cpu.resources.limits.cpu=2")
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		c, err := ParseCompute("f.yml", data, []string{set})
		if err == nil {
			if c == nil {
				t.Fatal("nil compute without error")
			}
			_ = ValidateCompute(c, Env{Locations: []string{"local"}})
		} else if AsErrors(err) == nil {
			t.Fatalf("error is not an Errors: %T %v", err, err)
		}
		_, _ = ParseComputePatch("f.yml", data)
	})
}
