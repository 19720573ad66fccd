package spec

import (
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

var datastoreFields = []string{"$schema", "name", "type", "description", "tags", "path",
	"account_name", "container_name", "endpoint", "protocol", "endpoint_url", "credentials"}

// azureDatastoreTypes are Azure ML's datastore types tide cannot reach.
var azureDatastoreTypes = []string{"azure_file", "azure_data_lake_gen1", "azure_data_lake_gen2", "one_lake"}

// azureDatastoreFields belong to Azure's other datastore types.
var azureDatastoreFields = []string{"file_share_name", "filesystem",
	"store_name", "artifact", "one_lake_workspace_name", "service_data_access_auth_identity"}

// blobProtocols are the protocols of an azure_blob datastore; both are
// HTTPS.
var blobProtocols = []string{"https", "wasbs"}

var (
	accountNameRE   = regexp.MustCompile(`^[a-z0-9]{3,24}$`)
	containerNameRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$|^\$root$`)
	endpointRE      = regexp.MustCompile(`^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$`)
)

var datastoreNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,254}$`)

// datastoreStatusFields are set by the server.
var datastoreStatusFields = map[string]bool{"workspace": true, "created_on": true, "etag": true, "id": true}

// azureStorageHint says what to do instead of an Azure storage reference.
const azureStorageHint = "tide reads Azure blob containers only; copy the data to a blob container (type: azure_blob) or to a folder every node can read (type: local, path: /the/folder) and register it with 'tide datastore create -f ds.yml'"

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
		case "account_name":
			ds.AccountName, _ = d.str(v, fp)
		case "container_name":
			ds.ContainerName, _ = d.str(v, fp)
		case "endpoint":
			ds.Endpoint, _ = d.str(v, fp)
		case "protocol":
			s, _ := d.str(v, fp)
			ds.Protocol = strings.ToLower(strings.TrimSpace(s))
		case "endpoint_url":
			ds.EndpointURL, _ = d.str(v, fp)
		case "credentials":
			ds.Credentials = d.credentials(v, fp)
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

// credentials reads an azure_blob datastore's credentials: account_key or
// sas_token. A service principal's fields are refused, not ignored.
func (d *decoder) credentials(n *yaml.Node, path string) *api.DatastoreCredentials {
	if isNull(n) {
		return nil
	}
	c := &api.DatastoreCredentials{}
	d.mapping(n, path, []string{"account_key", "sas_token"}, func(key string, v *yaml.Node, fp string) bool {
		switch key {
		case "account_key":
			c.AccountKey, _ = d.str(v, fp)
		case "sas_token":
			c.SASToken, _ = d.str(v, fp)
		case "type":
			// What the server returns instead of the secret: a document
			// that round-trips it keeps the stored secret of that kind.
			c.Type, _ = d.str(v, fp)
		case "tenant_id", "client_id", "client_secret", "authority_url", "resource_url", "certificate", "thumbprint":
			d.notSupported(fp, "service principal credentials are not supported yet; use credentials.account_key or credentials.sas_token")
		default:
			return false
		}
		return true
	})
	return c
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
	if ds.Type != api.DatastoreAzureBlob {
		for field, v := range map[string]string{"account_name": ds.AccountName, "container_name": ds.ContainerName,
			"endpoint": ds.Endpoint, "protocol": ds.Protocol, "endpoint_url": ds.EndpointURL} {
			if v != "" {
				bad(field, "belongs to azure_blob datastores; remove it from a %s datastore", ds.Type)
			}
		}
		if ds.Credentials != nil {
			bad("credentials", "belongs to azure_blob datastores; remove it from a %s datastore", ds.Type)
		}
	}
	switch {
	case ds.Type == api.DatastoreAzureBlob:
		checkBlobDatastore(ds, bad)
	case ds.Type == api.DatastoreLocal:
		switch {
		case strings.TrimSpace(ds.Path) == "":
			bad("path", "required for a local datastore: the folder, with the same absolute path on every node")
		case !filepath.IsAbs(ds.Path):
			bad("path", "%q must be an absolute path (the folder as the nodes see it)", ds.Path)
		}
	case ds.Type == "":
		bad("type", "required; tide supports type: local (with path: /a/folder) and azure_blob (with account_name and container_name)")
	case slices.Contains(azureDatastoreTypes, ds.Type):
		bad("type", "%s datastores are not supported: %s", ds.Type, azureStorageHint)
	default:
		bad("type", "%q is not a datastore type; tide supports type: local (with path: /a/folder) and azure_blob", ds.Type)
	}
}

func checkBlobDatastore(ds *api.Datastore, bad func(field, format string, args ...any)) {
	if ds.Path != "" {
		bad("path", "belongs to local datastores; an azure_blob datastore is its container (account_name, container_name)")
	}
	switch {
	case ds.AccountName == "":
		bad("account_name", "required for an azure_blob datastore: the storage account")
	case !accountNameRE.MatchString(ds.AccountName):
		bad("account_name", "%q must be 3-24 lower-case letters and digits", ds.AccountName)
	}
	switch {
	case ds.ContainerName == "":
		bad("container_name", "required for an azure_blob datastore: the blob container")
	case !containerNameRE.MatchString(ds.ContainerName):
		bad("container_name", "%q must be 3-63 lower-case letters, digits and single hyphens, starting and ending with a letter or digit", ds.ContainerName)
	}
	if ds.Protocol != "" && !slices.Contains(blobProtocols, ds.Protocol) {
		bad("protocol", "%q is not supported; use https or wasbs", ds.Protocol)
	}
	if ds.Endpoint != "" && !endpointRE.MatchString(ds.Endpoint) {
		bad("endpoint", "%q must be a storage suffix such as core.windows.net", ds.Endpoint)
	}
	if ds.EndpointURL != "" {
		u, err := url.Parse(ds.EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			bad("endpoint_url", "%q must be the account's blob service URL, as in http://127.0.0.1:10000/devstoreaccount1 for Azurite", ds.EndpointURL)
		}
	}
	if c := ds.Credentials; c != nil {
		switch {
		case c.AccountKey != "" && c.SASToken != "":
			bad("credentials", "give account_key or sas_token, not both")
		case c.Type != "" && !slices.Contains([]string{api.CredentialAccountKey, api.CredentialSASToken, api.CredentialNone}, c.Type):
			bad("credentials.type", "%q: want account_key, sas_token or none (it names the stored secret)", c.Type)
		case c.Type != "" && (c.AccountKey != "" || c.SASToken != "") && c.Type != c.Kind():
			bad("credentials.type", "says %s but the document gives %s; remove type", c.Type, c.Kind())
		}
	}
}
