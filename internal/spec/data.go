package spec

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
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
	// PathDatastore is azureml://datastores/NAME/paths/PATH, or the long
	// azureml://subscriptions/.../workspaces/WS/datastores/NAME/paths/PATH.
	PathDatastore = "datastore"
	// PathWASB is wasbs://CONTAINER@ACCOUNT.blob.ENDPOINT/PATH; the
	// server turns it into a PathDatastore of the datastore registered
	// for that account and container.
	PathWASB = "wasb"
	// PathAsset is a data asset, azureml:NAME:VERSION or azureml:NAME@latest;
	// the server replaces it with the asset's path.
	PathAsset = "asset"
)

// azureSchemes are Azure storage URL schemes tide cannot read.
var azureSchemes = []string{"abfss", "abfs", "adl", "azureml-blob"}

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
			if _, problem := ParseDataAssetRef(p); problem != "" {
				return "", problem
			}
			return PathAsset, ""
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
	case s == "wasbs" || s == "wasb":
		if _, ok := ParseBlobURL(p); !ok {
			return "", fmt.Sprintf("%q: want wasbs://CONTAINER@ACCOUNT.blob.core.windows.net/PATH", p)
		}
		return PathWASB, ""
	case slices.Contains(azureSchemes, s):
		return "", fmt.Sprintf("%s:// is Azure storage: %s", s, azureStorageHint)
	default:
		return "", fmt.Sprintf("%s:// paths are not supported; use a local path, a file:// or http(s):// URL, or azureml://datastores/NAME/paths/PATH", s)
	}
}

// DefaultOutputPath is where Azure writes an output without a path in
// datastore name: azureml/JOB/OUTPUT (placeholders expanded at submit).
func DefaultOutputPath(name string) string {
	return DatastoreURI(name, "azureml/${{name}}/${{output_name}}")
}

// DatastoreURI is the short reference to rel in datastore name.
func DatastoreURI(name, rel string) string {
	return "azureml://datastores/" + name + "/paths/" + rel
}

// longDatastoreRE is Azure's full datastore URI; tide has no subscription
// or resource group, and checks the workspace (LongDatastoreWorkspace).
var longDatastoreRE = regexp.MustCompile(`(?i)^azureml://subscriptions/[^/]+/resource[Gg]roups/[^/]+/(?:providers/Microsoft\.MachineLearningServices/)?workspaces/([^/]+)/(datastores/.*)$`)

// LongDatastoreWorkspace returns the workspace a long
// azureml://subscriptions/... datastore URI names, if p is one.
func LongDatastoreWorkspace(p string) (string, bool) {
	m := longDatastoreRE.FindStringSubmatch(strings.TrimSpace(p))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// ParseDatastorePath splits azureml://datastores/NAME/paths/PATH (or the
// long azureml://subscriptions/.../workspaces/WS/datastores/NAME/paths/PATH
// form) into the datastore name and the slash path inside it (cleaned,
// never leaving the datastore). problem says what is wrong otherwise.
func ParseDatastorePath(p string) (name, rel, problem string) {
	p = strings.TrimSpace(p)
	if m := longDatastoreRE.FindStringSubmatch(p); m != nil {
		p = "azureml://" + m[2]
	}
	rest, ok := strings.CutPrefix(p, "azureml://datastores/")
	if !ok {
		if strings.HasPrefix(p, "azureml://subscriptions/") {
			return "", "", fmt.Sprintf("%q: want azureml://subscriptions/SUB/resourcegroups/RG/workspaces/WS/datastores/NAME/paths/PATH", p)
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

// BlobURL is an Azure blob URL taken apart: wasbs://C@A.blob.E/P or
// https://A.blob.E/C/P.
type BlobURL struct {
	Account, Container, Endpoint, Path string
}

var blobHostRE = regexp.MustCompile(`^([a-z0-9]{3,24})\.blob\.([A-Za-z0-9.-]+)$`)

// ParseBlobURL takes apart a wasbs:// or wasb:// URL, or an https:// URL of
// a blob service (ACCOUNT.blob.ENDPOINT) without a query (a URL with a SAS
// token is fetched as it is).
func ParseBlobURL(p string) (BlobURL, bool) {
	u, err := url.Parse(strings.TrimSpace(p))
	if err != nil || u.RawQuery != "" {
		return BlobURL{}, false
	}
	m := blobHostRE.FindStringSubmatch(strings.ToLower(u.Hostname()))
	if m == nil {
		return BlobURL{}, false
	}
	b := BlobURL{Account: m[1], Endpoint: m[2]}
	rest := strings.TrimPrefix(u.Path, "/")
	switch strings.ToLower(u.Scheme) {
	case "wasbs", "wasb":
		if u.User == nil || u.User.Username() == "" {
			return BlobURL{}, false
		}
		b.Container = u.User.Username()
	case "https", "http":
		b.Container, rest, _ = strings.Cut(rest, "/")
	default:
		return BlobURL{}, false
	}
	if b.Container == "" || strings.Contains("/"+rest+"/", "/../") {
		return BlobURL{}, false
	}
	b.Path = path.Clean("/" + rest)[1:]
	return b, true
}
