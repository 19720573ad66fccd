package spec

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

// LatestVersion is the version label that names an environment's most
// recently created version ("azureml:NAME@latest").
const LatestVersion = "latest"

var environmentFields = []string{"$schema", "name", "version", "description", "tags", "image", "conda_file", "os_type", "tide"}

var environmentStatusFields = map[string]bool{"workspace": true, "created_on": true, "etag": true, "id": true, "creation_context": true}

var (
	envNameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)
	envVersionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,29}$`)
	// registryRefRE is Azure's reference to an environment of a registry,
	// azureml://registries/azureml/environments/NAME/labels/latest or
	// .../versions/VERSION.
	registryRefRE = regexp.MustCompile(`^azureml://registries/([^/]+)/environments/([^/]+)/(labels|versions)/([^/]+)$`)
)

// ParseEnvironment parses an environment file (Azure's environment YAML,
// plus tide's `tide:` block). sets are "--set path=value" overrides.
// conda_file may be a path, returned as condaPath for the caller to read
// relative to the file (the result's CondaFile stays empty), or an inline
// mapping, kept as YAML text in CondaFile. Version may be empty: the server
// then takes the next number. The error is an Errors.
func ParseEnvironment(file string, data []byte, sets []string) (env *api.Environment, condaPath string, err error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, "", d.err()
	}
	e := &api.Environment{}
	d.mapping(root, "", environmentFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "$schema":
		case "name":
			e.Name, _ = d.str(v, fp)
		case "version":
			e.Version, _ = d.str(v, fp)
		case "description":
			e.Description, _ = d.str(v, fp)
		case "tags":
			e.Tags = d.strMap(v, fp)
		case "image":
			e.Image, _ = d.str(v, fp)
		case "conda_file":
			rv := resolve(v)
			switch {
			case isNull(rv):
			case rv.Kind == yaml.ScalarNode:
				condaPath = rv.Value
			case rv.Kind == yaml.MappingNode:
				b, err := yaml.Marshal(rv)
				if err != nil {
					d.add(rv.Line, fp, "cannot be written back as YAML: %v", err)
				}
				e.CondaFile = string(b)
			default:
				d.add(rv.Line, fp, "must be a path to a conda file or a mapping, got %s", describe(rv))
			}
		case "os_type":
			if s, ok := d.str(v, fp); ok && !strings.EqualFold(s, "linux") {
				d.add(d.lines[fp], fp, "%s is not supported; tide runs Linux environments", s)
			}
		case "tide":
			e.Tide = d.environmentHost(v, fp)
		case "build":
			e.Build = d.buildContext(v, fp)
		case "inference_config":
			d.notSupported(fp, "not supported (tide runs training jobs, not inference servers); remove it")
		default:
			if environmentStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if len(d.errs) == 0 {
		checkEnvironment(e, condaPath != "", func(field, format string, args ...any) {
			d.add(d.lineFor(field), field, format, args...)
		})
	}
	if err := d.err(); err != nil {
		return nil, "", err
	}
	return e, condaPath, nil
}

func (d *decoder) environmentHost(n *yaml.Node, path string) *api.EnvironmentHost {
	if isNull(n) {
		return nil
	}
	h := &api.EnvironmentHost{}
	d.mapping(n, path, []string{"python", "path", "variables"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "python":
			h.Python, _ = d.str(v, fp)
		case "path":
			rv := resolve(v)
			switch {
			case isNull(rv):
			case rv.Kind == yaml.ScalarNode:
				h.Path = []string{rv.Value}
			case rv.Kind == yaml.SequenceNode:
				for _, item := range rv.Content {
					if s, ok := d.str(item, fp); ok {
						h.Path = append(h.Path, s)
					}
				}
			default:
				d.add(rv.Line, fp, "must be a folder or a list of folders, got %s", describe(rv))
			}
		case "variables":
			h.Variables = d.strMap(v, fp)
		default:
			return false
		}
		return true
	})
	return h
}

// ValidateEnvironment checks an environment as the server receives it (the
// conda file's content inline). The error is an Errors.
func ValidateEnvironment(e *api.Environment) error {
	var errs collector
	checkEnvironment(e, false, func(field, format string, args ...any) { errs.add(0, field, format, args...) })
	return errs.err()
}

func checkEnvironment(e *api.Environment, hasCondaPath bool, bad func(field, format string, args ...any)) {
	switch {
	case e.Name == "":
		bad("name", "required; the name jobs use as azureml:NAME:VERSION")
	case !envNameRE.MatchString(e.Name):
		bad("name", "%q must be 1-255 letters, digits, '.', '_' and '-', starting with a letter or digit", e.Name)
	}
	switch {
	case e.Version == "":
	case strings.EqualFold(e.Version, LatestVersion):
		bad("version", "%q is a label, not a version; use a number such as 1, or omit version to get the next one", e.Version)
	case !envVersionRE.MatchString(e.Version):
		bad("version", "%q must be 1-30 letters, digits, '.', '_' and '-', starting with a letter or digit", e.Version)
	}
	switch {
	case e.Build != nil && e.Build.Path == "":
		bad("build.path", "required: the folder holding the Dockerfile")
	case e.Build != nil && e.Image != "":
		bad("build", "set image or build, not both")
	case e.Image == "" && e.Build == nil && e.CondaFile == "" && !hasCondaPath && e.Tide == nil:
		bad("image", "an environment needs image, build, conda_file or a tide block (how the host provides it, e.g. tide: {python: /usr/bin/python3})")
	}
	if h := e.Tide; h != nil {
		if h.Python != "" && !filepath.IsAbs(h.Python) {
			bad("tide.python", "%q must be an absolute path, e.g. /usr/bin/python3", h.Python)
		}
		for _, p := range h.Path {
			if !filepath.IsAbs(p) || strings.Contains(p, ":") {
				bad("tide.path", "%q must be an absolute folder without ':'", p)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(h.Variables)) {
			if !varNameRE.MatchString(k) {
				bad("tide.variables."+k, "%q is not a valid variable name: use letters, digits and '_', not starting with a digit (e.g. MY_VAR)", k)
			}
		}
	}
}

// EnvironmentRef is a job's reference to a registered environment.
type EnvironmentRef struct {
	Name string
	// Version is a version, or LatestVersion.
	Version string
	// Curated is set for a reference to Azure's azureml registry
	// (azureml://registries/azureml/environments/NAME/...), whose NAME is
	// the curated environment AzureML-NAME.
	Curated bool
}

func (r EnvironmentRef) String() string {
	if r.Version == LatestVersion {
		return r.Name + "@latest"
	}
	return r.Name + ":" + r.Version
}

// ParseEnvironmentRef parses the environment references Azure's job files
// use: azureml:NAME:VERSION, azureml:NAME@latest, azureml:NAME (latest),
// and azureml://registries/REGISTRY/environments/NAME/labels/latest or
// .../versions/VERSION. The "azureml:" prefix may be left out.
func ParseEnvironmentRef(s string) (EnvironmentRef, error) {
	s = strings.TrimSpace(s)
	if m := registryRefRE.FindStringSubmatch(s); m != nil {
		r := EnvironmentRef{Name: m[2], Version: m[4]}
		if m[3] == "labels" {
			if m[4] != LatestVersion {
				return EnvironmentRef{}, &FieldError{Field: "environment", Message: errorf("label %q: tide knows only the label latest", m[4])}
			}
		}
		if m[1] == "azureml" {
			r.Curated = true
			r.Name = "AzureML-" + r.Name
		}
		return r, checkRef(r)
	}
	if f, ok := strings.CutPrefix(s, "file:"); ok {
		return EnvironmentRef{}, &FieldError{Field: "environment", Message: errorf("file:%s: an environment file is read by the CLI, which sends it with the job (tide job create -f); a request must carry the environment inline or name a registered one", f)}
	}
	if strings.HasPrefix(s, "azureml://") {
		return EnvironmentRef{}, &FieldError{Field: "environment", Message: errorf("%q: use azureml:NAME:VERSION, azureml:NAME@latest or azureml://registries/azureml/environments/NAME/labels/latest", s)}
	}
	s = strings.TrimPrefix(s, "azureml:")
	r := EnvironmentRef{Name: s, Version: LatestVersion}
	if name, label, ok := strings.Cut(s, "@"); ok {
		if label != LatestVersion {
			return EnvironmentRef{}, &FieldError{Field: "environment", Message: errorf("label %q: tide knows only the label latest (NAME@latest)", label)}
		}
		r.Name = name
	} else if name, version, ok := strings.Cut(s, ":"); ok {
		r.Name, r.Version = name, version
	}
	r.Curated = strings.HasPrefix(r.Name, "AzureML-")
	return r, checkRef(r)
}

func checkRef(r EnvironmentRef) error {
	if !envNameRE.MatchString(r.Name) {
		return &FieldError{Field: "environment", Message: errorf("%q is not an environment name; use azureml:NAME:VERSION or azureml:NAME@latest", r.Name)}
	}
	if r.Version != LatestVersion && !envVersionRE.MatchString(r.Version) {
		return &FieldError{Field: "environment", Message: errorf("version %q of environment %s is not a version", r.Version, r.Name)}
	}
	return nil
}
