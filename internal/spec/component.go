package spec

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var componentFields = []string{
	"$schema", "type", "name", "version", "display_name", "description", "tags",
	"inputs", "outputs", "code", "environment", "command", "environment_variables",
	"distribution", "resources", "is_deterministic",
}

var componentStatusFields = map[string]bool{"workspace": true, "created_on": true, "etag": true, "id": true, "creation_context": true}

// componentUnsupported are Azure command component fields tide does not
// implement, with what to tell the user.
var componentUnsupported = map[string]string{
	"additional_includes": "not supported yet; copy the files into the code folder",
	"services":            "not supported yet (interactive services); remove it",
	"instance_count":      "not supported yet here; set resources.instance_count",
}

// componentInputTypes are the input types a component may declare.
var componentInputTypes = []string{api.InputURIFolder, api.InputURIFile, api.InputMLflowModel, api.InputCustomModel, api.InputTritonModel, api.InputMLTable,
	"integer", "number", "string", "boolean"}

var componentNameRE = regexp.MustCompile(`^[a-z0-9_][a-z0-9_.-]{0,254}$`)

// ParseComponent parses a command component file (Azure's
// commandComponent YAML). sets are "--set path=value" overrides. Version
// may be empty: the server then takes the next number. code and an
// environment file: reference stay as written, for the caller to resolve
// relative to the file. The error is an Errors.
func ParseComponent(file string, data []byte, sets []string) (*api.Component, error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, d.err()
	}
	c := d.component(root, "")
	if len(d.errs) == 0 {
		checkComponent(c, "", func(field, format string, args ...any) {
			d.add(d.lineFor(field), field, format, args...)
		})
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// component decodes a component mapping, from a file or inline in a step.
func (d *decoder) component(n *yaml.Node, path string) *api.Component {
	c := &api.Component{Type: api.JobTypeCommand}
	d.mapping(n, path, componentFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "$schema":
		case "type":
			s, _ := d.str(v, fp)
			c.Type = strings.ToLower(strings.TrimSpace(s))
		case "name":
			c.Name, _ = d.str(v, fp)
		case "version":
			c.Version, _ = d.str(v, fp)
		case "display_name":
			c.DisplayName, _ = d.str(v, fp)
		case "description":
			c.Description, _ = d.str(v, fp)
		case "tags":
			c.Tags = d.strMap(v, fp)
		case "inputs":
			c.Inputs = d.componentInputs(v, fp)
		case "outputs":
			c.Outputs = d.outputs(v, fp)
		case "code":
			c.Code, _ = d.str(v, fp)
		case "environment":
			c.Environment = d.environment(v, fp)
		case "command":
			c.Command, _ = d.str(v, fp)
		case "environment_variables":
			c.EnvironmentVariables = d.strMap(v, fp)
		case "distribution":
			c.Distribution = d.distribution(v, fp)
		case "resources":
			c.Resources = d.resources(v, fp)
		case "is_deterministic":
			if b, ok := d.boolean(v, fp); ok {
				c.IsDeterministic = &b
			}
		default:
			if msg, ok := componentUnsupported[key]; ok {
				d.notSupported(fp, msg)
				return true
			}
			if componentStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	for name, o := range c.Outputs {
		if o.Type == "" {
			o.Type = DefaultOutputType
		}
		c.Outputs[name] = o
	}
	return c
}

func (d *decoder) componentInputs(n *yaml.Node, path string) map[string]api.ComponentInput {
	if isNull(n) {
		return nil
	}
	out := map[string]api.ComponentInput{}
	d.mapping(n, path, nil, func(name string, v *yaml.Node, fp string) bool {
		d.ioName(name, fp)
		in := api.ComponentInput{}
		d.mapping(v, fp, []string{"type", "default", "optional", "description", "enum", "min", "max", "mode"}, func(key string, v *yaml.Node, p string) bool {
			switch key {
			case "type":
				s, _ := d.str(v, p)
				in.Type = strings.ToLower(s)
			case "default":
				if s, ok := d.str(v, p); ok {
					in.Default = &s
				}
			case "optional":
				in.Optional, _ = d.boolean(v, p)
			case "description":
				in.Description, _ = d.str(v, p)
			case "enum":
				rv := resolve(v)
				if rv.Kind != yaml.SequenceNode {
					d.add(rv.Line, p, "must be a list of values, got %s", describe(rv))
					return true
				}
				for _, item := range rv.Content {
					if s, ok := d.str(item, p); ok {
						in.Enum = append(in.Enum, s)
					}
				}
			case "min", "max":
				s, ok := d.str(v, p)
				if !ok {
					return true
				}
				f, err := strconv.ParseFloat(s, 64)
				if err != nil {
					d.add(d.lines[p], p, "must be a number, got %q", s)
					return true
				}
				if key == "min" {
					in.Min = &f
				} else {
					in.Max = &f
				}
			case "mode":
				d.notSupported(p, "not supported on a component input; set the mode where the step gives the input")
			default:
				return false
			}
			return true
		})
		out[name] = in
		return true
	})
	return out
}

// ValidateComponent checks a component as the server receives it. The
// error is an Errors.
func ValidateComponent(c *api.Component) error {
	var errs collector
	checkComponent(c, "", func(field, format string, args ...any) { errs.add(0, field, format, args...) })
	return errs.err()
}

// checkComponent checks a component; prefix is its field path ("" for a
// file, "jobs.STEP.component." inline).
func checkComponent(c *api.Component, prefix string, bad func(field, format string, args ...any)) {
	if c.Type != "" && c.Type != api.JobTypeCommand {
		bad(prefix+"type", "%q components are not supported yet; tide runs type: command components", c.Type)
	}
	if c.Name != "" && !componentNameRE.MatchString(c.Name) {
		bad(prefix+"name", "%q must be lower-case letters, digits, '_', '.' and '-', starting with a letter, digit or '_'", c.Name)
	}
	if c.Version != "" && !envVersionRE.MatchString(c.Version) {
		bad(prefix+"version", "%q must be 1-30 letters, digits, '.', '_' and '-'", c.Version)
	}
	// The component's command runs as a command job: check it as one.
	j := ComponentJob(c)
	checkJobBody(j, func(field, format string, args ...any) { bad(prefix+field, format, args...) })
	for _, name := range sortedNames(c.Inputs) {
		in, fp := c.Inputs[name], prefix+"inputs."+name
		if !slices.Contains(componentInputTypes, in.Type) {
			bad(fp+".type", "required: one of %s (got %q)", strings.Join(componentInputTypes, ", "), in.Type)
			continue
		}
		if in.Default != nil {
			if msg := LiteralProblem(in, *in.Default); msg != "" {
				bad(fp+".default", "%s", msg)
			}
		}
		if (in.Min != nil || in.Max != nil) && in.Type != "integer" && in.Type != "number" {
			bad(fp, "min and max apply to integer and number inputs, not %s", in.Type)
		}
	}
}

// ComponentJob is the command job a component describes, without values
// for its inputs: literal inputs stand as their defaults, data inputs as
// empty paths. It is what validation checks the command against.
func ComponentJob(c *api.Component) *api.Job {
	j := &api.Job{
		Type: api.JobTypeCommand, Command: c.Command, Code: c.Code, Environment: c.Environment,
		EnvironmentVariables: c.EnvironmentVariables, Distribution: c.Distribution, Resources: c.Resources,
		Inputs: map[string]api.JobInput{}, Outputs: map[string]api.JobOutput{},
	}
	for name, in := range c.Inputs {
		if in.Optional && in.Default == nil {
			continue // $[[...]] blocks may name it
		}
		j.Inputs[name] = api.JobInput{Type: api.InputLiteral}
	}
	for name, o := range c.Outputs {
		j.Outputs[name] = api.JobOutput{Type: o.Type}
	}
	return j
}

// LiteralProblem says what is wrong with value for a literal input of in's
// type, enum and range ("" when it fits).
func LiteralProblem(in api.ComponentInput, value string) string {
	v := strings.TrimSpace(value)
	switch in.Type {
	case "integer":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return errorf("%q is not an integer", value)
		}
		return rangeProblem(in, float64(n))
	case "number":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errorf("%q is not a number", value)
		}
		return rangeProblem(in, f)
	case "boolean":
		if l := strings.ToLower(v); l != "true" && l != "false" {
			return errorf("%q is not true or false", value)
		}
	case "string":
		if len(in.Enum) > 0 && !slices.Contains(in.Enum, value) {
			return errorf("%q is not one of %s", value, strings.Join(in.Enum, ", "))
		}
	case api.InputURIFile, api.InputURIFolder, api.InputMLflowModel, api.InputCustomModel, api.InputTritonModel, api.InputMLTable:
		return errorf("a %s input takes data (a path or a step's output), not the value %q", in.Type, value)
	}
	return ""
}

func rangeProblem(in api.ComponentInput, f float64) string {
	if in.Min != nil && f < *in.Min {
		return errorf("%v is below the minimum %v", f, *in.Min)
	}
	if in.Max != nil && f > *in.Max {
		return errorf("%v is above the maximum %v", f, *in.Max)
	}
	return ""
}

// ComponentRef is a parsed reference to a registered component.
type ComponentRef struct {
	Name string
	// Version is a version, or LatestVersion.
	Version string
}

func (r ComponentRef) String() string {
	if r.Version == LatestVersion {
		return "azureml:" + r.Name + "@latest"
	}
	return "azureml:" + r.Name + ":" + r.Version
}

// ParseComponentRef parses azureml:NAME:VERSION, azureml:NAME@latest or
// azureml:NAME (latest).
func ParseComponentRef(s string) (ComponentRef, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "azureml://") {
		return ComponentRef{}, &FieldError{Field: "component", Message: errorf("%q: registries are not supported yet; register the component with 'tide component create -f FILE' and use azureml:NAME:VERSION", s)}
	}
	s, ok := strings.CutPrefix(s, "azureml:")
	if !ok {
		return ComponentRef{}, &FieldError{Field: "component", Message: errorf("%q: use a component file (./component.yml or file:./component.yml) or a registered component (azureml:NAME:VERSION, azureml:NAME@latest)", s)}
	}
	r := ComponentRef{Name: s, Version: LatestVersion}
	if name, label, ok := strings.Cut(s, "@"); ok {
		if label != LatestVersion {
			return ComponentRef{}, &FieldError{Field: "component", Message: errorf("label %q: tide knows only the label latest (NAME@latest)", label)}
		}
		r.Name = name
	} else if name, version, ok := strings.Cut(s, ":"); ok {
		r.Name, r.Version = name, version
	}
	if !componentNameRE.MatchString(r.Name) {
		return ComponentRef{}, &FieldError{Field: "component", Message: errorf("%q is not a component name; use azureml:NAME:VERSION or azureml:NAME@latest", r.Name)}
	}
	if r.Version != LatestVersion && !envVersionRE.MatchString(r.Version) {
		return ComponentRef{}, &FieldError{Field: "component", Message: errorf("version %q of component %s is not a version", r.Version, r.Name)}
	}
	return r, nil
}

// ComponentFile reports whether a step's component value names a file
// (./x.yml, file:./x.yml, a path ending in .yml or .yaml) and returns its
// path.
func ComponentFile(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutPrefix(s, "file:"); ok {
		return p, true
	}
	if strings.HasPrefix(s, "azureml:") {
		return "", false
	}
	if strings.HasSuffix(s, ".yml") || strings.HasSuffix(s, ".yaml") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || strings.HasPrefix(s, "/") {
		return s, true
	}
	return "", false
}
