package spec

import (
	"strings"
	"testing"
)

func TestClassifyDataPath(t *testing.T) {
	tests := []struct {
		path, kind, problem string
	}{
		{"./data", PathLocal, ""},
		{"data/train.csv", PathLocal, ""},
		{"/abs/data", PathLocal, ""},
		{"blob:" + strings.Repeat("a", 64), PathBlob, ""},
		{"blob:" + strings.Repeat("a", 64) + "/iris.csv", PathBlob, ""},
		{"file:///srv/data", PathFile, ""},
		{"file://host/srv/data", "", "absolute path on the node"},
		{"http://127.0.0.1:8080/d.tar.gz", PathHTTP, ""},
		{"https://azuremlexamples.blob.core.windows.net/datasets/iris.csv", PathHTTP, ""},
		{"https:///nohost", "", "not a valid URL"},
		{"azureml://datastores/shared/paths/iris/", PathDatastore, ""},
		{"azureml://datastores/shared/paths/../etc", "", "may not contain '..'"},
		{"azureml://datastores/shared/iris", "", "want azureml://datastores/NAME/paths/PATH"},
		{"azureml://subscriptions/x/resourcegroups/y/workspaces/z/datastores/d/paths/p", PathDatastore, ""},
		{"azureml://subscriptions/x/resourceGroups/y/providers/Microsoft.MachineLearningServices/workspaces/z/datastores/d/paths/p", PathDatastore, ""},
		{"azureml://subscriptions/x/workspaces/z/datastores/d/paths/p", "", "want azureml://subscriptions/SUB/resourcegroups/RG/workspaces/WS"},
		{"azureml:sampledata@latest", PathAsset, ""},
		{"azureml:sampledata:1", PathAsset, ""},
		{"azureml:sampledata@stable", "", "tide knows only the label latest"},
		{"azureml:sampledata", "", "refer to a data asset as azureml:NAME:VERSION or azureml:NAME@latest"},
		{"wasbs://datasets@azuremlexamples.blob.core.windows.net/", PathWASB, ""},
		{"wasbs://azuremlexamples.blob.core.windows.net/iris.csv", "", "want wasbs://CONTAINER@ACCOUNT"},
		{"abfss://fs@acct.dfs.core.windows.net/p", "", "abfss:// is Azure storage"},
		{"s3://bucket/key", "", "s3:// paths are not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			kind, problem := ClassifyDataPath(tt.path)
			if kind != tt.kind || (tt.problem == "") != (problem == "") || !strings.Contains(problem, tt.problem) {
				t.Fatalf("ClassifyDataPath(%q) = %q, %q; want %q, %q", tt.path, kind, problem, tt.kind, tt.problem)
			}
		})
	}
	name, rel, _ := ParseDatastorePath("azureml://datastores/shared/paths//iris//a.csv")
	if name != "shared" || rel != "iris/a.csv" {
		t.Fatalf("ParseDatastorePath = %q, %q", name, rel)
	}
	long := "azureml://subscriptions/s/resourcegroups/r/workspaces/team/datastores/blobs/paths/iris/a.csv"
	if name, rel, _ := ParseDatastorePath(long); name != "blobs" || rel != "iris/a.csv" {
		t.Fatalf("ParseDatastorePath(long) = %q, %q", name, rel)
	}
	if ws, ok := LongDatastoreWorkspace(long); !ok || ws != "team" {
		t.Fatalf("LongDatastoreWorkspace = %q, %v", ws, ok)
	}
}

func TestParseDataAsset(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"name: iris\nversion: 3\ntype: uri_file\npath: azureml://datastores/d/paths/iris.csv\n", ""},
		{"name: iris\npath: ./data\n", ""},
		{"name: iris\ntype: table\npath: ./data\n", `d.yml:2: type: "table": want uri_file, uri_folder or mltable`},
		{"name: iris\n", "d.yml: path: required"},
		{"name: iris\nversion: latest\npath: ./x\n", `d.yml:2: version: "latest" is not a version`},
		{"name: iris\npath: azureml:other:1\n", "is a data asset; a data asset's path is where the data is"},
	}
	for _, tt := range tests {
		a, err := ParseDataAsset("d.yml", []byte(tt.yaml), nil)
		if tt.want == "" {
			if err != nil || a.Name != "iris" || (a.Type != "uri_folder" && a.Version != "3") {
				t.Errorf("%q: %+v, %v", tt.yaml, a, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

func TestParseBlobURL(t *testing.T) {
	tests := []struct {
		url  string
		want BlobURL
		ok   bool
	}{
		{"wasbs://datasets@azuremlexamples.blob.core.windows.net/iris/a.csv", BlobURL{"azuremlexamples", "datasets", "core.windows.net", "iris/a.csv"}, true},
		{"wasbs://datasets@azuremlexamples.blob.core.windows.net/", BlobURL{"azuremlexamples", "datasets", "core.windows.net", ""}, true},
		{"https://acct.blob.core.chinacloudapi.cn/c/x/y", BlobURL{"acct", "c", "core.chinacloudapi.cn", "x/y"}, true},
		{"https://acct.blob.core.windows.net/c/x?sv=2020&sig=abc", BlobURL{}, false},
		{"https://example.com/c/x", BlobURL{}, false},
		{"wasbs://c@acct.blob.core.windows.net/a/../../b", BlobURL{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseBlobURL(tt.url)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParseBlobURL(%q) = %+v, %v; want %+v, %v", tt.url, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseDatastore(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"local", "name: shared\ntype: local\ndescription: team data\npath: /srv/data\ntags:\n  team: ml\n", ""},
		{"relative path", "name: shared\ntype: local\npath: data\n", `ds.yml:3: path: "data" must be an absolute path`},
		{"no path", "name: shared\ntype: local\n", "ds.yml: path: required for a local datastore"},
		{"azure blob", "$schema: x\nname: blob_example\ntype: azure_blob\naccount_name: acct\ncontainer_name: data\ncredentials:\n  account_key: abc\n", ""},
		{"azure blob bad container", "name: b\ntype: azure_blob\naccount_name: acct\ncontainer_name: c\n", `ds.yml:4: container_name: "c" must be 3-63`},
		{"azure blob no account", "name: b\ntype: azure_blob\ncontainer_name: data\n", "ds.yml: account_name: required for an azure_blob datastore"},
		{"azure blob two secrets", "name: b\ntype: azure_blob\naccount_name: acct\ncontainer_name: data\ncredentials:\n  account_key: a\n  sas_token: b\n", "credentials: give account_key or sas_token, not both"},
		{"azure blob service principal", "name: b\ntype: azure_blob\naccount_name: acct\ncontainer_name: data\ncredentials:\n  client_id: a\n", "ds.yml:6: credentials.client_id: service principal credentials are not supported yet"},
		{"azure blob bad protocol", "name: b\ntype: azure_blob\naccount_name: acct\ncontainer_name: data\nprotocol: ftp\n", `protocol: "ftp" is not supported`},
		{"azure blob bad endpoint_url", "name: b\ntype: azure_blob\naccount_name: acct\ncontainer_name: data\nendpoint_url: 127.0.0.1:10000\n", "endpoint_url: \"127.0.0.1:10000\" must be the account's blob service URL"},
		{"azure file", "name: f\ntype: azure_file\naccount_name: acct\nfile_share_name: s\n", "ds.yml:2: type: azure_file datastores are not supported"},
		{"account on local", "name: s\ntype: local\npath: /x\naccount_name: acct\n", "ds.yml:4: account_name: belongs to azure_blob datastores"},
		{"unknown type", "name: s\ntype: nfs\n", `ds.yml:2: type: "nfs" is not a datastore type`},
		{"bad name", "name: 1-bad\ntype: local\npath: /x\n", `ds.yml:1: name: "1-bad" must be`},
		{"unknown field", "name: s\ntype: local\npath: /x\npaht: 1\n", `ds.yml:4: unknown field "paht"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := ParseDatastore("ds.yml", []byte(tt.yaml), nil)
			if tt.wantErr == "" && ds != nil && ds.Type == "azure_blob" {
				if err != nil || ds.AccountName != "acct" || ds.ContainerName != "data" || ds.Credentials.Kind() != "account_key" {
					t.Fatalf("got %+v, %v", ds, err)
				}
				return
			}
			if tt.wantErr == "" {
				if err != nil || ds.Path != "/srv/data" || ds.Tags["team"] != "ml" {
					t.Fatalf("got %+v, %v", ds, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// FuzzDataPaths: classifying a path or parsing a datastore file never
// panics, and a datastore path never leaves its datastore.
func FuzzDataPaths(f *testing.F) {
	for _, s := range []string{"./data", "azureml://datastores/d/paths/a/../../b", "file:///x", "http://h/x.tar.gz",
		"wasbs://c@a.blob.core.windows.net/", "azureml:x@latest", "blob:abc/def", "name: d\ntype: local\npath: /x\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ClassifyDataPath(s)
		if _, rel, problem := ParseDatastorePath(s); problem == "" && (rel == ".." || strings.HasPrefix(rel, "../") || strings.HasPrefix(rel, "/")) {
			t.Fatalf("%q resolves outside its datastore: %q", s, rel)
		}
		_, _ = ParseDatastore("ds.yml", []byte(s), nil)
	})
}
