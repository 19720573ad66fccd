package spec

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

func (d *decoder) inputs(n *yaml.Node, path string) map[string]api.JobInput {
	if isNull(n) {
		return nil
	}
	out := map[string]api.JobInput{}
	d.mapping(n, path, nil, func(name string, v *yaml.Node, fp string) bool {
		d.ioName(name, fp)
		rv := resolve(v)
		switch {
		case isNull(rv):
			d.add(d.lines[fp], fp, "needs a value, or a mapping with type and path")
		case rv.Kind == yaml.ScalarNode:
			out[name] = api.JobInput{Type: api.InputLiteral, Value: rv.Value}
		case rv.Kind == yaml.MappingNode:
			out[name] = d.dataInput(rv, fp)
		default:
			d.add(rv.Line, fp, "must be a value or a mapping with type and path, got %s", describe(rv))
		}
		return true
	})
	return out
}

func (d *decoder) dataInput(n *yaml.Node, path string) api.JobInput {
	in := api.JobInput{}
	var literal *yaml.Node
	d.mapping(n, path, []string{"type", "path", "mode", "value", "default", "description", "optional"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "type":
			s, _ := d.str(v, fp)
			in.Type = strings.ToLower(s)
		case "path":
			in.Path, _ = d.str(v, fp)
		case "mode":
			s, _ := d.str(v, fp)
			in.Mode = strings.ToLower(s)
		case "value", "default":
			literal = v
		case "description":
			d.str(v, fp)
		case "optional":
			d.boolean(v, fp)
		default:
			return false
		}
		return true
	})
	typeLine := d.lineFor(path + ".type")
	switch {
	case api.IsDataType(in.Type):
		if literal != nil {
			d.add(d.lineFor(path+".value"), path+".value", "only literal inputs have a value; %s inputs have a path", in.Type)
		}
	case slices.Contains(literalTypes, in.Type) || (in.Type == "" && literal != nil):
		if literal == nil || isNull(literal) || resolve(literal).Kind != yaml.ScalarNode {
			d.add(typeLine, path+".value", "required for a %s input; or write the value directly (inputs.x: 3)", in.Type)
		} else {
			in = api.JobInput{Type: api.InputLiteral, Value: resolve(literal).Value}
		}
	case in.Type == "":
		// Azure's default type for a mapping is uri_folder.
		in.Type = api.InputURIFolder
	default:
		d.add(typeLine, path+".type", "unknown input type %q; use %s, or a literal value", in.Type, dataTypesText)
	}
	return in
}

func (d *decoder) outputs(n *yaml.Node, path string) map[string]api.JobOutput {
	if isNull(n) {
		return nil
	}
	out := map[string]api.JobOutput{}
	d.mapping(n, path, nil, func(name string, v *yaml.Node, fp string) bool {
		d.ioName(name, fp)
		o := api.JobOutput{}
		if !isNull(v) {
			d.mapping(v, fp, []string{"type", "mode", "path", "description"}, func(key string, v *yaml.Node, p string) bool {
				switch key {
				case "type":
					s, _ := d.str(v, p)
					o.Type = strings.ToLower(s)
				case "mode":
					s, _ := d.str(v, p)
					o.Mode = strings.ToLower(s)
				case "path":
					o.Path, _ = d.str(v, p)
				case "description":
					d.str(v, p)
				case "name", "version":
					d.notSupported(p, "not supported yet (registering outputs as data assets); remove it")
				default:
					return false
				}
				return true
			})
		}
		out[name] = o
		return true
	})
	return out
}

func (d *decoder) ioName(name, fp string) {
	if !ioNameRE.MatchString(name) {
		d.add(d.lines[fp], fp, "name %q must be letters, digits and '_', not starting with a digit", name)
	}
}

// commandProblems checks the ${{...}} bindings of a command. A binding
// inside Azure's optional block $[[ ... ]] may name an input that is not
// given: the block is then left out of the command.
func commandProblems(cmd string, inputs map[string]api.JobInput, outputs map[string]api.JobOutput) []string {
	var problems []string
	seen := map[string]bool{}
	optional := optionalRE.FindAllStringIndex(cmd, -1)
	inOptional := func(pos int) bool {
		for _, r := range optional {
			if pos >= r[0] && pos < r[1] {
				return true
			}
		}
		return false
	}
	for _, m := range bindingRE.FindAllStringSubmatchIndex(cmd, -1) {
		whole, expr := cmd[m[0]:m[1]], cmd[m[2]:m[3]]
		if seen[whole] {
			continue
		}
		seen[whole] = true
		ref := referenceExpr.FindStringSubmatch(expr)
		if ref == nil {
			problems = append(problems, errorf("%s is not a binding tide knows; use ${{inputs.NAME}} or ${{outputs.NAME}}", whole))
			continue
		}
		kind, name := ref[1], ref[2]
		var ok bool
		if kind == "inputs" {
			_, ok = inputs[name]
		} else {
			_, ok = outputs[name]
		}
		if ok {
			continue
		}
		if kind == "inputs" && inOptional(m[0]) {
			continue
		}
		problems = append(problems, errorf("%s is not defined under %s; add %s.%s or remove the reference", whole, kind, kind, name))
	}
	return problems
}

// BindCommand substitutes ${{inputs.x}} and ${{outputs.y}} in cmd with the
// given values (for data inputs and outputs, the paths on the node). An
// optional block $[[ ... ]] is kept without its brackets when every input it
// names has a value, and dropped otherwise. Bindings without a value are
// left as they are; ValidateJob rejects those before a job is queued.
func BindCommand(cmd string, inputs map[string]string, outputs map[string]string) string {
	lookup := func(expr string) (string, bool) {
		ref := referenceExpr.FindStringSubmatch(strings.TrimSpace(expr))
		if ref == nil {
			return "", false
		}
		if ref[1] == "inputs" {
			v, ok := inputs[ref[2]]
			return v, ok
		}
		v, ok := outputs[ref[2]]
		return v, ok
	}
	substitute := func(s string) string {
		return bindingRE.ReplaceAllStringFunc(s, func(whole string) string {
			if v, ok := lookup(bindingRE.FindStringSubmatch(whole)[1]); ok {
				return v
			}
			return whole
		})
	}
	cmd = optionalRE.ReplaceAllStringFunc(cmd, func(block string) string {
		inner := optionalRE.FindStringSubmatch(block)[1]
		for _, m := range bindingRE.FindAllStringSubmatch(inner, -1) {
			if _, ok := lookup(m[1]); !ok {
				return ""
			}
		}
		return substitute(inner)
	})
	return substitute(cmd)
}
