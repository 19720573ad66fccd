package demo

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/examples"
)

// mlExamples are the examples the demo runs after the hello jobs: the
// scikit-learn classifier and the 2-node PyTorch DDP job.
var mlExamples = []string{examples.SklearnDigits, examples.PyTorchDDP}

// MLMissing says what the host lacks to run the ML examples ("" when
// nothing): they use Debian's python3-sklearn and python3-torch.
func MLMissing() string {
	if err := exec.Command("/usr/bin/python3", "-c", "import sklearn, torch").Run(); err != nil {
		return "/usr/bin/python3 cannot import sklearn and torch (apt-get install python3-sklearn python3-torch)"
	}
	return ""
}

// mlJobs registers the examples' environments and returns their jobs,
// ready to submit, with the example files written under dir and each
// job's code folder uploaded as a snapshot.
func mlJobs(ctx context.Context, c *api.Client, ws, dir, suffix string) ([]*api.Job, error) {
	exampleDir := filepath.Join(dir, "examples")
	if err := examples.WriteTo(exampleDir); err != nil {
		return nil, fmt.Errorf("writing the examples: %w", err)
	}
	envs, err := examples.Environments()
	if err != nil {
		return nil, err
	}
	for _, e := range envs {
		if _, _, err := c.CreateEnvironment(ctx, ws, e); err != nil {
			return nil, fmt.Errorf("registering environment %s: %w", e.Name, err)
		}
	}
	var jobs []*api.Job
	for _, name := range mlExamples {
		j, err := examples.Job(name)
		if err != nil {
			return nil, err
		}
		if err := examples.UploadCode(ctx, c, j, filepath.Join(exampleDir, name)); err != nil {
			return nil, fmt.Errorf("example %s: %w", name, err)
		}
		j.Name = name + "-" + suffix
		j.ExperimentName = "tide-demo"
		jobs = append(jobs, j)
	}
	return jobs, nil
}
