package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var dataAssetFields = []string{"$schema", "name", "version", "type", "path", "description", "tags"}

// dataAssetStatusFields are set by the server.
var dataAssetStatusFields = map[string]bool{"workspace": true, "created_on": true, "etag": true, "id": true, "archived": true}

var (
	dataAssetTypes   = []string{api.DataURIFile, api.DataURIFolder, api.DataMLTable}
	dataAssetNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$`)
	dataAssetRefRE   = regexp.MustCompile(`^azureml:([A-Za-z0-9][A-Za-z0-9_.-]*)(?::([A-Za-z0-9][A-Za-z0-9_.-]*)|@([A-Za-z0-9_.-]+))$`)
	dataAssetVerRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	dataAssetDefault = api.DataURIFolder
)

// ParseDataAsset parses a data asset file in Azure ML's YAML shape (name,
// version, type uri_file | uri_folder | mltable, path, description, tags).
// A missing type is uri_folder, as in Azure. The error is an Errors.
func ParseDataAsset(file string, data []byte, sets []string) (*api.DataAsset, error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, d.err()
	}
	a := &api.DataAsset{}
	d.mapping(root, "", dataAssetFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "$schema":
		case "name":
			a.Name, _ = d.str(v, fp)
		case "version":
			a.Version, _ = d.str(v, fp)
		case "type":
			s, _ := d.str(v, fp)
			a.Type = strings.ToLower(strings.TrimSpace(s))
		case "path":
			a.Path, _ = d.str(v, fp)
		case "description":
			a.Description, _ = d.str(v, fp)
		case "tags":
			a.Tags = d.strMap(v, fp)
		default:
			if dataAssetStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if a.Type == "" {
		a.Type = dataAssetDefault
	}
	if len(d.errs) == 0 {
		checkDataAsset(a, func(field, format string, args ...any) {
			d.add(d.lineFor(field), field, format, args...)
		})
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return a, nil
}

// ValidateDataAsset checks a data asset. The error is an Errors.
func ValidateDataAsset(a *api.DataAsset) error {
	var errs collector
	checkDataAsset(a, func(field, format string, args ...any) { errs.add(0, field, format, args...) })
	return errs.err()
}

func checkDataAsset(a *api.DataAsset, bad func(field, format string, args ...any)) {
	switch {
	case a.Name == "":
		bad("name", "required; letters, digits, '_', '-' and '.'")
	case !dataAssetNameRE.MatchString(a.Name):
		bad("name", "%q must be letters, digits, '_', '-' and '.', starting with a letter or digit", a.Name)
	}
	if a.Version != "" && (!dataAssetVerRE.MatchString(a.Version) || a.Version == LatestVersion) {
		bad("version", "%q is not a version; use a number such as 1 (or leave it out for the next one)", a.Version)
	}
	if !slices.Contains(dataAssetTypes, a.Type) {
		bad("type", "%q: want uri_file, uri_folder or mltable", a.Type)
	}
	switch kind, problem := ClassifyDataPath(a.Path); {
	case strings.TrimSpace(a.Path) == "":
		bad("path", "required: a local path (uploaded), azureml://datastores/NAME/paths/PATH, wasbs://, or an http(s) URL")
	case problem != "":
		bad("path", "%s", problem)
	case kind == PathAsset:
		bad("path", "%q is a data asset; a data asset's path is where the data is", a.Path)
	}
}

// DataAssetRef is a parsed azureml:NAME:VERSION or azureml:NAME@latest.
type DataAssetRef struct {
	Name string
	// Version is a version, or LatestVersion.
	Version string
}

func (r DataAssetRef) String() string {
	if r.Version == LatestVersion {
		return "azureml:" + r.Name + "@latest"
	}
	return "azureml:" + r.Name + ":" + r.Version
}

// ParseDataAssetRef parses a job input's reference to a data asset.
func ParseDataAssetRef(p string) (DataAssetRef, string) {
	m := dataAssetRefRE.FindStringSubmatch(strings.TrimSpace(p))
	if m == nil {
		return DataAssetRef{}, fmt.Sprintf("%q: refer to a data asset as azureml:NAME:VERSION or azureml:NAME@latest", p)
	}
	if m[3] != "" && m[3] != LatestVersion {
		return DataAssetRef{}, fmt.Sprintf("%q: tide knows only the label latest (azureml:%s@latest)", p, m[1])
	}
	r := DataAssetRef{Name: m[1], Version: m[2]}
	if m[3] != "" {
		r.Version = LatestVersion
	}
	return r, ""
}
