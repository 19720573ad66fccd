package spec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

func TestParseEnvironment(t *testing.T) {
	tests := []struct {
		name, yml string
		want      *api.Environment
		conda     string
		errs      []string
	}{
		{
			name: "azure fields and the tide block",
			yml: `$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json
name: sklearn
version: 1
image: mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest
conda_file: conda.yml
description: d
tags: {team: ml}
tide:
  python: /usr/bin/python3
  path: /opt/bin
  variables: {A: 1}
`,
			want: &api.Environment{Name: "sklearn", Version: "1", Image: "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest",
				Description: "d", Tags: map[string]string{"team": "ml"},
				Tide: &api.EnvironmentHost{Python: "/usr/bin/python3", Path: []string{"/opt/bin"}, Variables: map[string]string{"A": "1"}}},
			conda: "conda.yml",
		},
		{
			name: "inline conda mapping, no version",
			yml:  "name: e\nconda_file:\n  dependencies: [python=3.11]\n",
			want: &api.Environment{Name: "e", CondaFile: "dependencies: [python=3.11]\n"},
		},
		{
			name: "problems are named with their lines",
			yml:  "name: -bad\nversion: latest\ntide:\n  python: python3\n  path: [relative]\n",
			errs: []string{`f.yml:1: name: "-bad" must be`, `f.yml:2: version: "latest" is a label`, `f.yml:4: tide.python: "python3" must be an absolute path`, `f.yml:5: tide.path: "relative" must be an absolute folder`},
		},
		{
			name: "an environment needs something to run with",
			yml:  "name: empty\n",
			errs: []string{"image: an environment needs image, build, conda_file or a tide block"},
		},
		{
			name: "unknown and unsupported fields",
			yml:  "name: e\nimage: x\nbuild: {path: ., dockerfile_path: docker/Dockerfile, target: x}\nimgae: y\n",
			errs: []string{"f.yml:3: build.dockerfile_path: not supported yet", `build: unknown field "target"`, `f.yml:4: unknown field "imgae"; did you mean "image"?`},
		},
		{
			name: "image or build",
			yml:  "name: e\nimage: x\nbuild: {path: .}\n",
			errs: []string{"build: set image or build, not both"},
		},
		{
			name: "build without its folder",
			yml:  "name: e\nbuild: {dockerfile_path: Dockerfile}\n",
			errs: []string{"build.path: required: the folder holding the Dockerfile"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, conda, err := ParseEnvironment("f.yml", []byte(tt.yml), nil)
			if len(tt.errs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.errs)
				}
				for _, w := range tt.errs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEnvironment: %v", err)
			}
			if !reflect.DeepEqual(e, tt.want) || conda != tt.conda {
				t.Errorf("got %+v (conda %q)\nwant %+v (conda %q)", e, conda, tt.want, tt.conda)
			}
		})
	}
}

func TestParseEnvironmentRef(t *testing.T) {
	tests := []struct {
		ref  string
		want EnvironmentRef
		err  string
	}{
		{ref: "azureml:sklearn:1", want: EnvironmentRef{Name: "sklearn", Version: "1"}},
		{ref: "azureml:sklearn@latest", want: EnvironmentRef{Name: "sklearn", Version: "latest"}},
		{ref: "sklearn", want: EnvironmentRef{Name: "sklearn", Version: "latest"}},
		{ref: "azureml:AzureML-sklearn-1.5@latest", want: EnvironmentRef{Name: "AzureML-sklearn-1.5", Version: "latest", Curated: true}},
		{ref: "azureml://registries/azureml/environments/sklearn-1.5/labels/latest", want: EnvironmentRef{Name: "AzureML-sklearn-1.5", Version: "latest", Curated: true}},
		{ref: "azureml://registries/azureml/environments/sklearn-1.5/versions/23", want: EnvironmentRef{Name: "AzureML-sklearn-1.5", Version: "23", Curated: true}},
		{ref: "azureml://registries/myreg/environments/mine/versions/2", want: EnvironmentRef{Name: "mine", Version: "2"}},
		{ref: "azureml:sklearn@stable", err: `label "stable"`},
		{ref: "azureml://registries/azureml/environments/x/labels/stable", err: `label "stable"`},
		{ref: "azureml://subscriptions/x/environments/y", err: "use azureml:NAME:VERSION"},
		{ref: "azureml:bad name:1", err: "is not an environment name"},
		{ref: "azureml:x:1 2", err: "is not a version"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := ParseEnvironmentRef(tt.ref)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestJobEnvironmentReference(t *testing.T) {
	_, err := ParseJob("job.yml", []byte("command: x\nenvironment: azureml:env@stable\n"), nil)
	if err == nil || !strings.Contains(err.Error(), `environment: label "stable"`) {
		t.Fatalf("err = %v, want the environment's label named", err)
	}
	j, err := ParseJob("job.yml", []byte("command: x\nenvironment: azureml:env:3\n"), nil)
	if err != nil || j.Environment.Ref != "azureml:env:3" {
		t.Fatalf("job = %+v, %v", j, err)
	}
}

func FuzzParseEnvironment(f *testing.F) {
	f.Add([]byte("name: e\nversion: 1\nimage: x\ntide: {python: /usr/bin/python3, path: [/a], variables: {A: 1}}\n"), "version=2")
	f.Add([]byte("name: e\nconda_file: {dependencies: [a]}\n"), "tide.python=/x")
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		e, _, err := ParseEnvironment("f.yml", data, []string{set})
		if err == nil {
			if e == nil {
				t.Fatal("nil environment without error")
			}
			_ = ValidateEnvironment(e)
		} else if AsErrors(err) == nil {
			t.Fatalf("error is not an Errors: %T %v", err, err)
		}
		_, _ = ParseEnvironmentRef(string(data))
	})
}
