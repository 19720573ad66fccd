package spec

import (
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

func TestServerlessJobs(t *testing.T) {
	for _, tt := range []struct {
		compute string
		want    bool
	}{{"", true}, {"serverless", true}, {"azureml:serverless", true}, {"serverless-abcdefghij", true}, {"cpu-cluster", false}, {"azureml:cpu-cluster", false}} {
		if got := IsServerless(&api.Job{Compute: tt.compute}); got != tt.want {
			t.Errorf("IsServerless(compute %q) = %v, want %v", tt.compute, got, tt.want)
		}
	}

	j, err := ParseJob("job.yml", []byte("command: 'true'\nresources:\n  instance_type: standard_ds2_v2\n  instance_count: 2\nqueue_settings:\n  job_tier: Spot\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ServerlessCompute(j, Env{Locations: []string{"local"}}, "Standard_DS3_v2", "local")
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != "Standard_DS2_v2" || c.Tier != api.TierLowPriority || c.Location != "local" || c.MaxInstances != 0 || c.MinInstances != 0 || c.IdleTimeBeforeScaleDown != 0 || c.Type != api.ComputeTypeAmlCompute {
		t.Errorf("serverless compute = %+v", c)
	}
	// No instance_type: the server's default; standard, premium and no
	// tier are dedicated.
	for _, tier := range []string{"", "null", "standard", "premium", "basic"} {
		j := &api.Job{Command: "true", QueueSettings: &api.QueueSettings{JobTier: tier}}
		c, err := ServerlessCompute(j, Env{}, "Standard_DS3_v2", "local")
		if err != nil || c.Size != "Standard_DS3_v2" || c.Tier != api.TierDedicated {
			t.Errorf("job_tier %q: %+v %v", tier, c, err)
		}
	}

	bad := []struct {
		yml, want string
	}{
		{"resources:\n  instance_type: Standard_DS3_v9\n", `resources.instance_type: unknown VM size "Standard_DS3_v9"; nearest sizes: Standard_DS3_v2, `},
		{"resources:\n  instance_type: Standard_ND96amsr_A100_v4\nqueue_settings:\n  job_tier: spot\n", "queue_settings.job_tier: spot runs on low-priority nodes, which size Standard_ND96amsr_A100_v4 cannot be"},
	}
	for _, b := range bad {
		j, err := ParseJob("job.yml", []byte("command: 'true'\n"+b.yml), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ServerlessCompute(j, Env{}, "Standard_DS3_v2", "local")
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want %q", b.yml, err, b.want)
		}
	}
	if _, err := ServerlessCompute(&api.Job{}, Env{Locations: []string{"local"}}, "Standard_DS3_v2", "eastus"); err == nil || !strings.Contains(err.Error(), "serverless.location") {
		t.Errorf("a serverless location not configured: %v", err)
	}
}
