package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEvalMLTable(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.csv", "b.csv", "notes.txt", "images/cat/1.png", "images/cat/2.png", "images/dog/3.png", "images/dog/x.jpg"} {
		p := filepath.Join(dir, filepath.FromSlash(f))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(f), 0o644)
	}
	cases := []struct {
		name, table, want, err string
	}{
		{"file, folder and pattern", "paths:\n  - file: ./notes.txt\n  - folder: ./images/cat\n  - pattern: ./*.csv\n", "notes.txt images/cat/1.png images/cat/2.png a.csv b.csv", ""},
		{"** spans folders", "paths:\n  - pattern: ./images/**/*.png\n", "images/cat/1.png images/cat/2.png images/dog/3.png", ""},
		{"the whole folder, MLTable itself left out, each file once", "paths:\n  - folder: .\n  - file: a.csv\n", "a.csv b.csv images/cat/1.png images/cat/2.png images/dog/3.png images/dog/x.jpg notes.txt", ""},
		{"skip then take, then read_delimited", "paths:\n  - pattern: ./images/**\ntransformations:\n  - skip: 1\n  - take: 2\n  - read_delimited:\n      header: all_files_same_headers\n", "images/cat/2.png images/dog/3.png", ""},
		{"a seeded sample", "paths:\n  - pattern: '**'\ntransformations:\n  - take_random_sample:\n      probability: 0.5\n      seed: 7\n", "", ""},
		{"a URI", "paths:\n  - folder: azureml://datastores/blobs/paths/images\n", "", "MLTable paths[0].folder: not supported yet: azureml://datastores/blobs/paths/images is not relative to the MLTable's folder"},
		{"leaving the folder", "paths:\n  - file: ../secret\n", "", "MLTable paths[0].file: ../secret leaves the MLTable's folder"},
		{"a missing file", "paths:\n  - file: ./c.csv\n", "", "MLTable paths[0].file: c.csv: no such file"},
		{"a pattern naming nothing", "paths:\n  - pattern: ./*.parquet\n", "", "MLTable paths[0].pattern: ./*.parquet names no file"},
		{"rows after a read", "paths:\n  - file: a.csv\ntransformations:\n  - read_delimited: {delimiter: ','}\n  - take: 5\n", "", "MLTable transformations[1].take: not supported yet under eval_mount and eval_download: it works on the table's rows"},
		{"a transformation tide does not know", "paths:\n  - file: a.csv\ntransformations:\n  - shuffle: true\n", "", "MLTable transformations[0].shuffle: not supported yet"},
		{"no paths", "type: mltable\n", "", "MLTable: paths: required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, "MLTable"), []byte(c.table), 0o644)
			got, err := evalMLTable(dir)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want != "" && strings.Join(got, " ") != c.want {
				t.Errorf("files %q, want %q", strings.Join(got, " "), c.want)
			}
			if c.name == "a seeded sample" {
				again, _ := evalMLTable(dir)
				if len(got) == 0 || len(got) == 7 || strings.Join(again, " ") != strings.Join(got, " ") {
					t.Errorf("a sample of 7 files with p=0.5 and a seed: %q, then %q; want a part, the same each time", got, again)
				}
			}
		})
	}
}
