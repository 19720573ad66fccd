package agent

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// bindingRE matches ${{inputs.NAME}} and ${{outputs.NAME}}, with optional
// spaces inside the braces as Azure ML allows.
var bindingRE = regexp.MustCompile(`\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_.\-]+)\s*\}\}`)

// bindCommand replaces input references by their literal values and output
// references by the absolute folder of the output. It is a small local
// binder; the spec package validates references when a job is submitted, so
// an unknown one here means the server sent an inconsistent assignment.
//
// TODO(lead): switch to the spec package's binder once it exists.
func bindCommand(command string, inputs map[string]string, outputs []string, outputsDir string) (string, error) {
	outs := make(map[string]bool, len(outputs))
	for _, o := range outputs {
		outs[o] = true
	}
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
			if !outs[name] {
				errs = append(errs, fmt.Sprintf("command: ${{outputs.%s}} is not an output of the job; declare it under outputs", name))
				return ref
			}
			return filepath.Join(outputsDir, name)
		}
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return bound, nil
}
