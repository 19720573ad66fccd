package server_test

// End-to-end tests of azure_blob datastores against Azurite, a real blob
// service: real agents download inputs and upload outputs with Azure's SDK.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/spec"
)

func TestAzureBlobDatastoreForReal(t *testing.T) {
	az := azuritetest.Start(t)
	blobs := az.Container(t, "data", map[string]string{
		"example-data/iris.csv":       "sepal_length,species\n5.1,setosa\n",
		"example-data/more/notes.txt": "measured in cm\n",
	})
	in, _ := newServer(t)
	ctx := context.Background()

	// The secret goes in and never comes back out.
	out, created, err := in.client.PutDatastore(ctx, "default", az.Datastore("workspaceblobstore", "data"))
	if err != nil || !created {
		t.Fatalf("PutDatastore: %v, created %v", err, created)
	}
	got, err := in.client.Datastore(ctx, "default", "workspaceblobstore")
	if err != nil {
		t.Fatal(err)
	}
	list, err := in.client.Datastores(ctx, "default")
	if err != nil || len(list) != 2 || list[1].Name != "workspaceblobstore" {
		t.Fatalf("Datastores: %v %v", list, err)
	}
	for _, d := range []*api.Datastore{out, got, &list[1]} {
		if c := d.Credentials; c == nil || c.AccountKey != "" || c.SASToken != "" || c.Type != api.CredentialAccountKey {
			t.Fatalf("datastore as users see it carries %+v; want only type account_key", c)
		}
	}
	// A replacement that carries no secret (edited from show -o yaml)
	// keeps the stored one: the jobs below still authenticate.
	got.Description = "example data"
	if _, _, err := in.client.PutDatastore(ctx, "default", got); err != nil {
		t.Fatal(err)
	}
	bad := az.Datastore("badkey", "secure")
	bad.Credentials.AccountKey = "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXk="
	if _, _, err := in.client.PutDatastore(ctx, "default", bad); err != nil {
		t.Fatal(err)
	}
	createCompute(t, in, cluster)

	const iris = "azureml://datastores/workspaceblobstore/paths/example-data/iris.csv"
	jobs := []struct {
		yml, want string
	}{
		{"command: cat ${{inputs.iris_csv}}\ncompute: cpu-cluster\ninputs:\n  iris_csv:\n    type: uri_file\n    path: " + iris + "\n", "5.1,setosa"},
		{"command: ls -R ${{inputs.data_dir}}\ncompute: cpu-cluster\ninputs:\n  data_dir:\n    type: uri_folder\n    path: azureml://datastores/workspaceblobstore/paths/example-data/\n", "notes.txt"},
		{"command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: wasbs://data@devstoreaccount1.blob.core.windows.net/example-data/iris.csv\n", "5.1,setosa"},
		{"command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: https://devstoreaccount1.blob.core.windows.net/data/example-data/iris.csv\n", "5.1,setosa"},
		{"command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: azureml://subscriptions/s/resourcegroups/rg/workspaces/default/datastores/workspaceblobstore/paths/example-data/iris.csv\n", "5.1,setosa"},
		{"command: echo trained > ${{outputs.model}}/model.txt\ncompute: cpu-cluster\noutputs:\n  model:\n    type: uri_folder\n    mode: upload\n    path: azureml://datastores/workspaceblobstore/paths/runs/${{name}}/${{output_name}}\n", "outputs.model: uploaded 1 files"},
	}
	var submitted []*api.Job
	for _, c := range jobs {
		submitted = append(submitted, submit(t, in, c.yml))
	}
	for i, c := range jobs {
		j := waitJob(t, in, submitted[i].Name, 60*time.Second)
		text := logText(t, in, j.Name)
		if j.Status != api.JobCompleted || !strings.Contains(text, c.want) {
			t.Errorf("job %d (%s): %s (%s); want Completed with %q in:\n%s", i, j.Name, j.Status, j.Error, c.want, text)
		}
		// Every form of reference is stored as the short one nodes resolve.
		for _, in := range j.Inputs {
			if in.Path != iris && in.Path != "azureml://datastores/workspaceblobstore/paths/example-data" {
				t.Errorf("job %d: input path stored as %q", i, in.Path)
			}
		}
	}
	// The folder twice on a one-node cluster that stays up: the second
	// job's blobs all come from the node's cache, none over the network.
	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	for i, want := range []string{"2 files, 2 downloaded, 0 from the node's cache", "2 files, 0 downloaded, 2 from the node's cache"} {
		j := submit(t, in, strings.Replace(jobs[1].yml, "compute: cpu-cluster", "compute: one-node", 1))
		if j = waitJob(t, in, j.Name, 60*time.Second); j.Status != api.JobCompleted {
			t.Fatalf("%s: %s (%s)", j.Name, j.Status, j.Error)
		}
		if text := logText(t, in, j.Name); !strings.Contains(text, want) {
			t.Errorf("read %d of the folder: log lacks %q:\n%s", i+1, want, text)
		}
	}
	model := submitted[len(submitted)-1].Name
	if b, err := blobs.ReadBytes(ctx, "runs/"+model+"/model/model.txt"); err != nil || string(b) != "trained\n" {
		t.Errorf("output read back with the SDK: %q, %v", b, err)
	}

	// Refused at submit, saying what to do.
	for _, c := range []struct{ yml, want string }{
		{"command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: wasbs://other@devstoreaccount1.blob.core.windows.net/x.csv\n",
			"inputs.f.path: no datastore of workspace default is container other of account devstoreaccount1; register it with 'tide datastore create -f ds.yml'"},
		{"command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: azureml://subscriptions/s/resourcegroups/rg/workspaces/team/datastores/workspaceblobstore/paths/x.csv\n",
			"names workspace team, but the job runs in workspace default"},
		{"command: echo\ncompute: cpu-cluster\noutputs:\n  o:\n    path: azureml://datastores/nosuch/paths/x\n",
			`outputs.o.path: datastore "nosuch" not found in workspace default`},
	} {
		j, err := spec.ParseJob("job.yml", []byte(c.yml), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.client.CreateJob(ctx, "default", j); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("submit: %v; want %q", err, c.want)
		}
	}

	// Failing before the command runs, naming the input and the reason.
	missing := submit(t, in, "command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: azureml://datastores/workspaceblobstore/paths/example-data/missing.csv\n")
	wrongKey := submit(t, in, "command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: azureml://datastores/badkey/paths/example-data/iris.csv\n")
	for _, c := range []struct {
		job  *api.Job
		want string
	}{
		{missing, "inputs.f: azureml://datastores/workspaceblobstore/paths/example-data/missing.csv: datastore workspaceblobstore: no blob at " + az.URL + "/data/example-data/missing.csv"},
		{wrongKey, "inputs.f: azureml://datastores/badkey/paths/example-data/iris.csv: datastore badkey: authentication failed for account devstoreaccount1"},
	} {
		j := waitJob(t, in, c.job.Name, 60*time.Second)
		if j.Status != api.JobFailed || !strings.Contains(j.Error, c.want) {
			t.Errorf("%s: %s (%s); want Failed with %q", j.Name, j.Status, j.Error, c.want)
		}
	}
}

// TestPipelineDefaultDatastoreForReal: with settings.default_datastore a
// pipeline's step outputs that name no path are written to Azure's
// default path in that datastore (azureml/JOB/OUTPUT), besides being
// handed to the next step; a step's own path, or the path of the
// pipeline output it binds, wins. Read back from Azurite with the SDK.
func TestPipelineDefaultDatastoreForReal(t *testing.T) {
	az := azuritetest.Start(t)
	blobs := az.Container(t, "runs", nil)
	in, _ := newServer(t)
	ctx := context.Background()
	if _, _, err := in.client.PutDatastore(ctx, "default", az.Datastore("blobs", "runs")); err != nil {
		t.Fatal(err)
	}
	createCompute(t, in, cluster)
	const pipeline = `type: pipeline
settings:
  default_datastore: azureml:blobs
  default_compute: azureml:cpu-cluster
outputs:
  final:
    type: uri_folder
    path: azureml://datastores/blobs/paths/final-out
jobs:
  make:
    command: echo made > ${{outputs.out}}/data.txt
    outputs:
      out:
        type: uri_folder
  use:
    command: cat ${{inputs.x}}/data.txt > ${{outputs.result}}/copy.txt
    inputs:
      x: ${{parent.jobs.make.outputs.out}}
    outputs:
      result: ${{parent.outputs.final}}
  mine:
    command: echo mine > ${{outputs.o}}/m.txt
    outputs:
      o:
        type: uri_folder
        path: azureml://datastores/blobs/paths/explicit/${{name}}
`
	step := runPipeline(t, in, pipeline)
	for blob, want := range map[string]string{
		"azureml/" + step["make"] + "/out/data.txt": "made\n", // the default path
		"final-out/copy.txt":                        "made\n", // the bound pipeline output's path
		"explicit/" + step["mine"] + "/m.txt":       "mine\n", // the step's own path
	} {
		if b, err := blobs.ReadBytes(ctx, blob); err != nil || string(b) != want {
			t.Errorf("blob %s: %q, %v; want %q", blob, b, err, want)
		}
	}
	if j, err := in.client.Job(ctx, "default", step["make"]); err != nil || j.Outputs["out"].Path != "azureml://datastores/blobs/paths/azureml/"+step["make"]+"/out" {
		t.Errorf("step make's job output: %+v, %v", j.Outputs, err)
	}

	// Refused at submit, naming the field.
	for _, c := range []struct{ from, to, want string }{
		{"default_datastore: azureml:blobs", "default_datastore: azureml:nosuch", `settings.default_datastore: datastore "nosuch" not found in workspace default`},
		{"datastores/blobs/paths/final-out", "datastores/nosuch/paths/final-out", `outputs.final.path: datastore "nosuch" not found in workspace default`},
		{"datastores/blobs/paths/explicit", "datastores/nosuch/paths/explicit", `jobs.mine.outputs.o.path: datastore "nosuch" not found in workspace default`},
	} {
		j, err := spec.ParseJob("p.yml", []byte(strings.Replace(pipeline, c.from, c.to, 1)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.client.CreateJob(ctx, "default", j); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("submit with %s: %v; want %q", c.to, err, c.want)
		}
	}
}
