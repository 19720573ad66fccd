package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/filestore"
)

// A job's artifacts are the stored files and the empty ones its record
// keeps; a stored file of the same name wins, and a folder's own entry is
// no file.
func TestJobFilesAddTheRecord(t *testing.T) {
	ctx := context.Background()
	files, err := filestore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := &api.Job{Workspace: "ws", Name: "j", EmptyArtifacts: []string{"outputs/out/", "outputs/model/empty.txt", "logs/std_log.txt", "outputs/model/w.bin"}}
	for name, body := range map[string]string{"outputs/model/w.bin": "weights", "logs/extra.txt": "x"} {
		if err := files.Put(ctx, artifactsName("ws", "j")+"/"+name, strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	got := func(dir string) []string {
		fs, err := jobFiles(ctx, files, j, dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fs {
			out = append(out, f.Name+":"+strings.Repeat("#", int(f.Size)))
		}
		return out
	}
	if all, want := got(""), []string{"logs/extra.txt:#", "logs/std_log.txt:", "outputs/model/empty.txt:", "outputs/model/w.bin:#######"}; !slices.Equal(all, want) {
		t.Errorf("all: %q, want %q", all, want)
	}
	if model, want := got("outputs/model"), []string{"empty.txt:", "w.bin:#######"}; !slices.Equal(model, want) {
		t.Errorf("outputs/model: %q, want %q", model, want)
	}
	if out := got("outputs/out"); len(out) != 0 {
		t.Errorf("outputs/out: %q, want no file", out)
	}
	if !hasEmptyFolder(j, "outputs/out") || !hasEmptyFolder(j, "outputs/model") || hasEmptyFolder(j, "outputs/o") {
		t.Error("hasEmptyFolder")
	}
}
