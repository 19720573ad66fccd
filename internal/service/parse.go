package service

import (
	"strings"

	"github.com/tideml/tide/internal/spec"
)

// ParseKinds are the kinds of Azure ML file Parse reads.
var ParseKinds = []string{"compute", "datastore", "environment", "job"}

// Parse reads an Azure ML YAML file of the given kind (with --set style
// overrides) and returns the object the API takes, changing nothing. It lets
// clients without a YAML parser (the Python SDK's load_job, Studio's paste
// box) read files exactly as the CLI does, with the same file:line:field
// errors. file names the file in those errors.
func (s *Service) Parse(kind, file string, body []byte, sets []string) (any, error) {
	if file == "" {
		file = "request body"
	}
	var (
		out any
		err error
	)
	switch kind {
	case "compute":
		out, err = spec.ParseCompute(file, body, sets)
	case "datastore":
		out, err = spec.ParseDatastore(file, body, sets)
	case "environment":
		out, err = parseEnvironmentFile(file, body, sets)
	case "job":
		out, err = spec.ParseJob(file, body, sets)
	default:
		return nil, errorf(404, "NotFound", "kind %q: tide parses %s files", kind, strings.Join(ParseKinds, ", "))
	}
	if err != nil {
		return nil, validation(err)
	}
	return out, nil
}

// EnvironmentFile is an environment file as read: when conda_file names a
// file, CondaPath says which (relative to the environment file) and the
// caller reads it, as the CLI does.
type EnvironmentFile struct {
	Environment any    `json:"environment"`
	CondaPath   string `json:"conda_path,omitempty"`
}

func parseEnvironmentFile(file string, body []byte, sets []string) (any, error) {
	e, conda, err := spec.ParseEnvironment(file, body, sets)
	if err != nil {
		return nil, err
	}
	return EnvironmentFile{Environment: e, CondaPath: conda}, nil
}
