package spec

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
)

// Kinds of data paths (a data input's path, or a job's code).
const (
	// PathLocal is a path on the submitting machine; the CLI uploads it and
	// replaces it with a PathBlob reference.
	PathLocal = "local"
	// PathBlob is "blob:HEX[/FILE]", a snapshot the CLI uploaded.
	PathBlob = "blob"
	// PathFile is a file:// URL, read on the node.
	PathFile = "file"
	// PathHTTP is an http(s):// URL, fetched on the node.
	PathHTTP = "http"
	// PathDatastore is azureml://datastores/NAME/paths/PATH.
	PathDatastore = "datastore"
)

// azureSchemes are Azure storage URL schemes tide cannot read.
var azureSchemes = []string{"wasbs", "wasb", "abfss", "abfs", "adl", "azureml-blob"}

// ClassifyDataPath tells what kind of path p is, or why tide cannot use
// it (problem is then not empty).
func ClassifyDataPath(p string) (kind, problem string) {
	p = strings.TrimSpace(p)
	if _, _, ok := api.ParseBlobRef(p); ok {
		return PathBlob, ""
	}
	scheme, _, hasScheme := strings.Cut(p, "://")
	if !hasScheme || strings.ContainsAny(scheme, "/\\") {
		if strings.HasPrefix(p, "azureml:") {
			return "", fmt.Sprintf("%q refers to an Azure ML data or code asset, which tide does not have; point path at a local path, a file:// or http(s):// URL, or azureml://datastores/NAME/paths/PATH", p)
		}
		return PathLocal, ""
	}
	switch s := strings.ToLower(scheme); {
	case s == "file":
		u, err := url.Parse(p)
		if err != nil || u.Path == "" || (u.Host != "" && u.Host != "localhost") {
			return "", fmt.Sprintf("%q: a file URL names an absolute path on the node, as in file:///data/train.csv", p)
		}
		return PathFile, ""
	case s == "http" || s == "https":
		if u, err := url.Parse(p); err != nil || u.Host == "" {
			return "", fmt.Sprintf("%q is not a valid URL", p)
		}
		return PathHTTP, ""
	case s == "azureml":
		if _, _, err := ParseDatastorePath(p); err != "" {
			return "", err
		}
		return PathDatastore, ""
	case slices.Contains(azureSchemes, s):
		return "", fmt.Sprintf("%s:// is Azure storage: %s", s, azureStorageHint)
	default:
		return "", fmt.Sprintf("%s:// paths are not supported; use a local path, a file:// or http(s):// URL, or azureml://datastores/NAME/paths/PATH", s)
	}
}

// ParseDatastorePath splits azureml://datastores/NAME/paths/PATH into the
// datastore name and the slash path inside it (cleaned, never leaving
// the datastore). problem says what is wrong otherwise.
func ParseDatastorePath(p string) (name, rel, problem string) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(p), "azureml://datastores/")
	if !ok {
		if strings.HasPrefix(p, "azureml://subscriptions/") {
			return "", "", fmt.Sprintf("%q names a datastore in an Azure workspace; tide resolves only azureml://datastores/NAME/paths/PATH in its own workspace", p)
		}
		return "", "", fmt.Sprintf("%q: tide resolves azureml://datastores/NAME/paths/PATH only", p)
	}
	name, rest, _ = strings.Cut(rest, "/")
	sub, ok := strings.CutPrefix(rest, "paths/")
	if !ok && rest != "paths" {
		return "", "", fmt.Sprintf("%q: want azureml://datastores/NAME/paths/PATH", p)
	}
	if !datastoreNameRE.MatchString(name) {
		return "", "", fmt.Sprintf("%q: datastore name %q must be letters, digits and '_'", p, name)
	}
	rel = path.Clean("/" + sub)[1:]
	if strings.Contains("/"+sub+"/", "/../") {
		return "", "", fmt.Sprintf("%q: the path may not contain '..'", p)
	}
	return name, rel, ""
}
