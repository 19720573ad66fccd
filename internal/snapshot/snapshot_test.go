package snapshot

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/archive"
)

func TestIgnorePatterns(t *testing.T) {
	tests := []struct {
		pattern string
		path    string
		dir     bool
		want    bool
	}{
		{"*.pyc", "a.pyc", false, true},
		{"*.pyc", "src/deep/a.pyc", false, true},
		{"*.pyc", "a.py", false, false},
		{"data/", "data", true, true},
		{"data/", "data", false, false},
		{"data/", "src/data", true, true},
		{"/data", "data", true, true},
		{"/data", "src/data", true, false},
		{"src/*.txt", "src/a.txt", false, true},
		{"src/*.txt", "src/x/a.txt", false, false},
		{"src/*.txt", "lib/src/a.txt", false, false},
		{"**/logs", "a/b/logs", true, true},
		{"**/logs", "logs", true, true},
		{"a/**/z", "a/z", false, true},
		{"a/**/z", "a/b/c/z", false, true},
		{"build/**", "build/x/y", false, true},
		{"file?.txt", "file1.txt", false, true},
		{"file?.txt", "file10.txt", false, false},
		{"[abc].md", "b.md", false, true},
		{"[!abc].md", "b.md", false, false},
		{`\#notes`, "#notes", false, true},
		{"# comment", "# comment", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.path, func(t *testing.T) {
			sets := []ruleSet{parseIgnore("", []byte(tt.pattern+"\n"))}
			if got := ignored(sets, tt.path, tt.dir); got != tt.want {
				t.Fatalf("ignored(%q, %q) = %v, want %v (re %v)", tt.pattern, tt.path, got, tt.want, sets[0].rules)
			}
		})
	}
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// unpacked packs src and returns the sorted file list of the result.
func unpacked(t *testing.T, src string) (*Snapshot, []string) {
	t.Helper()
	s, err := Pack(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Remove() })
	f, err := os.Open(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dst := t.TempDir()
	if err := archive.Extract(f, dst, 0); err != nil {
		t.Fatal(err)
	}
	var files []string
	filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(files)
	return s, files
}

func TestPackHonoursIgnoreFiles(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{
			name: "gitignore with negation and nested file",
			files: map[string]string{
				".gitignore": "*.log\n!keep.log\ndata/\n/top.txt\n", "a.py": "", "x.log": "", "keep.log": "",
				"data/big.csv": "", "top.txt": "", "sub/top.txt": "", "sub/.gitignore": "*.tmp\n", "sub/b.tmp": "", "b.tmp": "",
				".git/HEAD": "",
			},
			want: []string{".gitignore", "a.py", "b.tmp", "keep.log", "sub/.gitignore", "sub/top.txt"},
		},
		{
			name:  "amlignore wins over gitignore",
			files: map[string]string{".amlignore": "secret\n", ".gitignore": "*.py\n", "a.py": "", "secret": ""},
			want:  []string{".amlignore", ".gitignore", "a.py"},
		},
		{
			name:  "no ignore file",
			files: map[string]string{"src/main.py": "print(1)", "README": ""},
			want:  []string{"README", "src/main.py"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tt.files)
			_, got := unpacked(t, root)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("files = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPackIsContentAddressed(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	files := map[string]string{"src/train.py": "print('hi')\n", "cfg.yml": "lr: 0.1\n"}
	write(t, a, files)
	write(t, b, files)
	os.Chtimes(filepath.Join(b, "cfg.yml"), time0, time0)
	sa, _ := unpacked(t, a)
	sb, _ := unpacked(t, b)
	if sa.Digest != sb.Digest || sa.Files != 2 || sa.Bytes != 20 {
		t.Fatalf("digests %s / %s, files %d, bytes %d", sa.Digest, sb.Digest, sa.Files, sa.Bytes)
	}
	write(t, b, map[string]string{"cfg.yml": "lr: 0.2\n"})
	if sc, _ := unpacked(t, b); sc.Digest == sa.Digest {
		t.Fatal("a changed file kept the digest")
	}
}

func TestPackSingleFileAndLinks(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{"d/data.csv": "a,b\n"})
	_, got := unpacked(t, filepath.Join(root, "d", "data.csv"))
	if !slices.Equal(got, []string{"data.csv"}) {
		t.Fatalf("single file: %v", got)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "d", "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(filepath.Join(root, "d")); err == nil || !strings.Contains(err.Error(), "outside the folder") {
		t.Fatalf("link outside: %v", err)
	}
}

var time0 = time.Unix(1000, 0)

// FuzzIgnore: any ignore file parses and matches without panicking.
func FuzzIgnore(f *testing.F) {
	for _, s := range []string{"*.pyc\n!keep\n/data/\n", "a/**/b\n[!x]y\n\\#c\n", "[", "**"} {
		f.Add(s, "a/b/c.pyc")
	}
	f.Fuzz(func(t *testing.T, file, p string) {
		ignored([]ruleSet{parseIgnore("", []byte(file))}, p, false)
	})
}
