package spec

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var datastoreFields = []string{"$schema", "name", "type", "description", "tags", "path"}

// azureDatastoreTypes are Azure ML's datastore types: tide reads their
// files but cannot reach Azure storage.
var azureDatastoreTypes = []string{"azure_blob", "azure_file", "azure_data_lake_gen1", "azure_data_lake_gen2", "one_lake"}

// azureDatastoreFields belong to Azure's datastore types.
var azureDatastoreFields = []string{"account_name", "container_name", "file_share_name", "filesystem",
	"store_name", "protocol", "endpoint", "credentials", "artifact", "one_lake_workspace_name", "service_data_access_auth_identity"}

var datastoreNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,254}$`)

// datastoreStatusFields are set by the server.
var datastoreStatusFields = map[string]bool{"workspace": true, "created_on": true, "etag": true, "id": true}

// azureStorageHint says what to do instead of an Azure storage reference.
const azureStorageHint = "tide cannot reach Azure storage; copy the data to a folder every node can read and register it with 'tide datastore create -f ds.yml' (type: local, path: /the/folder)"

// ParseDatastore parses a datastore file in Azure ML's YAML shape. tide
// runs type local: a folder with the same path on every node, given by the
// tide field path. Azure's storage types are rejected with what to do
// instead. It also runs ValidateDatastore. The error is an Errors.
func ParseDatastore(file string, data []byte, sets []string) (*api.Datastore, error) {
	d := newDecoder(file)
	root := d.parse(data, sets)
	if root == nil {
		return nil, d.err()
	}
	ds := &api.Datastore{}
	d.mapping(root, "", datastoreFields, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "$schema":
		case "name":
			ds.Name, _ = d.str(v, fp)
		case "type":
			s, _ := d.str(v, fp)
			ds.Type = strings.ToLower(strings.TrimSpace(s))
		case "description":
			ds.Description, _ = d.str(v, fp)
		case "tags":
			ds.Tags = d.strMap(v, fp)
		case "path":
			ds.Path, _ = d.str(v, fp)
		default:
			if slices.Contains(azureDatastoreFields, key) {
				// Reported with the type, which says more.
				return true
			}
			if datastoreStatusFields[key] {
				d.readOnly(v, fp)
				return true
			}
			return false
		}
		return true
	})
	if len(d.errs) == 0 {
		checkDatastore(ds, func(field, format string, args ...any) {
			d.add(d.lineFor(field), field, format, args...)
		})
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return ds, nil
}

// ValidateDatastore checks a datastore. The error is an Errors.
func ValidateDatastore(ds *api.Datastore) error {
	var errs collector
	checkDatastore(ds, func(field, format string, args ...any) { errs.add(0, field, format, args...) })
	return errs.err()
}

func checkDatastore(ds *api.Datastore, bad func(field, format string, args ...any)) {
	switch {
	case ds.Name == "":
		bad("name", "required; letters, digits and '_', starting with a letter")
	case !datastoreNameRE.MatchString(ds.Name):
		bad("name", "%q must be 1-255 letters, digits and '_', starting with a letter", ds.Name)
	}
	switch {
	case ds.Type == api.DatastoreLocal:
		switch {
		case strings.TrimSpace(ds.Path) == "":
			bad("path", "required for a local datastore: the folder, with the same absolute path on every node")
		case !filepath.IsAbs(ds.Path):
			bad("path", "%q must be an absolute path (the folder as the nodes see it)", ds.Path)
		}
	case ds.Type == "":
		bad("type", "required; tide supports type: local (with path: /a/folder)")
	case slices.Contains(azureDatastoreTypes, ds.Type):
		bad("type", "%s datastores are not supported: %s", ds.Type, azureStorageHint)
	default:
		bad("type", "%q is not a datastore type; tide supports type: local (with path: /a/folder)", ds.Type)
	}
}
