package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyLocal(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "sub", "a.csv"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(src, "f.csv"), []byte("f"), 0o644)
	tests := []struct {
		name, src string
		isFile    bool
		want      string // file under the returned path, or the error
		wantErr   bool
	}{
		{"folder", "d", false, "sub/a.csv", false},
		{"file", "f.csv", true, "", false},
		{"file as folder", "f.csv", false, "is a file; use type: uri_file", true},
		{"folder as file", "d", true, "is a folder; use type: uri_folder", true},
		{"missing", "nope", false, "no such file", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := t.TempDir()
			got, err := copyLocal(filepath.Join(src, tt.src), dst, tt.isFile)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(got, tt.want)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadOnlyTreeAndRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "in")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "x"), []byte("x"), 0o755)
	if err := readOnlyTree(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o555, filepath.Join(dir, "sub"): 0o555, filepath.Join(dir, "sub", "x"): 0o555} {
		info, err := os.Stat(p)
		if err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, info.Mode().Perm(), err, want)
		}
	}
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
}
