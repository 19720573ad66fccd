package agent

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// bindingRE matches ${{inputs.NAME}} and ${{outputs.NAME}}, with optional
// spaces inside the braces as Azure ML allows.
var bindingRE = regexp.MustCompile(`\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_.\-]+)\s*\}\}`)

// bindCommand replaces input references by their values (literals, or the
// local paths of data inputs) and output references by their paths. It is a small local
// binder; the spec package validates references when a job is submitted, so
// an unknown one here means the server sent an inconsistent assignment.
//
// TODO(lead): switch to the spec package's binder once it exists.
func bindCommand(command string, inputs map[string]string, outputs map[string]string) (string, error) {
	var errs []string
	bound := bindingRE.ReplaceAllStringFunc(command, func(ref string) string {
		m := bindingRE.FindStringSubmatch(ref)
		kind, name := m[1], m[2]
		switch kind {
		case "inputs":
			v, ok := inputs[name]
			if !ok {
				errs = append(errs, fmt.Sprintf("command: ${{inputs.%s}} is not an input of the job; declare it under inputs", name))
				return ref
			}
			return v
		default:
			p, ok := outputs[name]
			if !ok {
				errs = append(errs, fmt.Sprintf("command: ${{outputs.%s}} is not an output of the job; declare it under outputs", name))
				return ref
			}
			return p
		}
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return bound, nil
}

// outputPaths maps each output to what ${{outputs.NAME}} binds to: the
// folder outputs/NAME, or for a uri_file output the file outputs/NAME/NAME.
func (j *job) outputPaths() map[string]string {
	out := make(map[string]string, len(j.as.Outputs))
	for _, o := range j.as.Outputs {
		out[o] = filepath.Join(j.outputsDir, o)
		if slices.Contains(j.as.FileOutputs, o) {
			out[o] = filepath.Join(j.outputsDir, o, o)
		}
	}
	return out
}
