package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/dockerengine/dockertest"
)

// TestReadOnlyBinds: every runtime that binds read-only shows a host
// folder and a file at another path, readable and not writable (EROFS),
// without copying them; the process runtime also as another user.
func TestReadOnlyBinds(t *testing.T) {
	runtimes := map[string]func(t *testing.T) (Runtime, string){
		"process": func(t *testing.T) (Runtime, string) {
			if !(Process{}).BindsReadOnly() {
				t.Skip("the process runtime binds read-only only as root")
			}
			return Process{OutputDelay: 200 * time.Millisecond}, ""
		},
		"process as nobody": func(t *testing.T) (Runtime, string) {
			if !(Process{}).BindsReadOnly() {
				t.Skip("the process runtime binds read-only only as root")
			}
			u, err := LookupUser("nobody")
			if err != nil {
				t.Fatal(err)
			}
			return Process{User: u, OutputDelay: 200 * time.Millisecond}, ""
		},
		"sandbox": func(t *testing.T) (Runtime, string) {
			needBwrap(t)
			return &Sandbox{OutputDelay: 200 * time.Millisecond}, ""
		},
		"docker": func(t *testing.T) (Runtime, string) {
			engine := dockertest.Engine(t)
			return &Docker{Engine: engine, OutputDelay: time.Second}, dockertest.Busybox(t, engine)
		},
	}
	for name, make := range runtimes {
		t.Run(name, func(t *testing.T) {
			rt, image := make(t)
			src := t.TempDir()
			os.Chmod(src, 0o755)
			if err := os.WriteFile(filepath.Join(src, "data.csv"), []byte("1,2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chmod(filepath.Join(src, "data.csv"), 0o666) // writable by anyone but for the bind
			dir := t.TempDir()
			os.Chmod(dir, 0o755)
			folder, file := filepath.Join(dir, "in", "folder"), filepath.Join(dir, "in", "file.csv")
			os.MkdirAll(folder, 0o755)
			os.WriteFile(file, nil, 0o444)
			var out syncBuffer
			spec := Spec{
				Command: "cat " + folder + "/data.csv " + file + "; echo x > " + folder + "/new; echo x >> " + file + "; rm " + folder + "/data.csv; echo done",
				Dir:     dir, Env: []string{"PATH=/usr/bin:/bin"}, Image: image, Stdout: &out, Stderr: &out,
				Name:     "ro-test-" + strings.ReplaceAll(name, " ", "-") + "-" + time.Now().Format("150405.000"),
				ReadOnly: []Bind{{Source: src, Target: folder}, {Source: filepath.Join(src, "data.csv"), Target: file}},
			}
			h, err := rt.Start(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if code, err := h.Wait(); code != 0 || err != nil {
				t.Fatalf("exit %d, %v:\n%s", code, err, out.String())
			}
			got := out.String()
			if strings.Count(got, "1,2\n") != 2 || strings.Count(got, "Read-only file system") != 3 || !strings.Contains(got, "done\n") {
				t.Errorf("output %q; want the file twice, then three EROFS errors", got)
			}
			entries, _ := os.ReadDir(src)
			if b, _ := os.ReadFile(filepath.Join(src, "data.csv")); len(entries) != 1 || string(b) != "1,2\n" {
				t.Errorf("the source changed: %d entries, data.csv %q", len(entries), b)
			}
			if entries, _ := os.ReadDir(folder); len(entries) != 0 {
				t.Errorf("the bind target on the host holds %d entries; the bind must stay the job's", len(entries))
			}
		})
	}
}
