package agent

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tideml/tide/api"
)

// evaluates reports whether mode evaluates the MLTable (Azure's eval_mount
// and eval_download): the files its MLTable names (paths, then file-level
// transformations) are delivered, not the MLTable's folder.
func evaluates(mode string) bool {
	_, ok := api.EvaluatedMode(mode)
	return ok
}

// mlTable is what of an MLTable file decides which files it names.
type mlTable struct {
	Paths           []map[string]string    `yaml:"paths"`
	Transformations []map[string]yaml.Node `yaml:"transformations"`
}

// evalMLTable reads the MLTable file in dir and returns the files it
// names, relative to dir (slash-separated), in its order: each entry of
// paths (file, folder: every file under it, pattern: a glob where **
// spans folders), then take, skip and take_random_sample on that list.
// Paths must stay in dir; read_* transformations say how to parse the
// files and leave the list alone; a row or column transformation cannot
// be applied to files and is refused, as is anything tide does not know.
func evalMLTable(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "MLTable"))
	if err != nil {
		return nil, err
	}
	var t mlTable
	if err := yaml.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("MLTable: %w", err)
	}
	if len(t.Paths) == 0 {
		return nil, fmt.Errorf("MLTable: paths: required to evaluate it (eval_mount, eval_download): the files or folders it names")
	}
	root := os.DirFS(dir)
	var files []string
	seen := map[string]bool{}
	for i, p := range t.Paths {
		if len(p) != 1 {
			return nil, fmt.Errorf("MLTable paths[%d]: give one of file, folder or pattern", i)
		}
		for kind, v := range p {
			field := fmt.Sprintf("MLTable paths[%d].%s", i, kind)
			rel, err := relativePath(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			got, err := expandPath(root, kind, rel)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			if len(got) == 0 {
				return nil, fmt.Errorf("%s: %s names no file", field, v)
			}
			for _, f := range got {
				if !seen[f] {
					seen[f] = true
					files = append(files, f)
				}
			}
		}
	}
	read := false
	for i, tr := range t.Transformations {
		for name, v := range tr {
			field := fmt.Sprintf("MLTable transformations[%d].%s", i, name)
			switch {
			case strings.HasPrefix(name, "read_"):
				read = true
			case read:
				return nil, fmt.Errorf("%s: not supported yet under eval_mount and eval_download: it works on the table's rows or columns, which tide does not evaluate; use mode: ro_mount and load the table in the job (mltable.load)", field)
			case name == "take" || name == "skip":
				var n int
				if err := v.Decode(&n); err != nil || n < 0 {
					return nil, fmt.Errorf("%s: want a number of files, 0 or more", field)
				}
				if name == "take" {
					files = files[:min(n, len(files))]
				} else {
					files = files[min(n, len(files)):]
				}
			case name == "take_random_sample":
				var s struct {
					Probability *float64 `yaml:"probability"`
					Seed        *uint64  `yaml:"seed"`
				}
				if err := v.Decode(&s); err != nil || s.Probability == nil || *s.Probability < 0 || *s.Probability > 1 {
					return nil, fmt.Errorf("%s: want probability (0 to 1) and optionally seed", field)
				}
				var r *rand.Rand
				if s.Seed != nil {
					r = rand.New(rand.NewPCG(*s.Seed, 0))
				} else {
					r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				}
				files = slices.DeleteFunc(files, func(string) bool { return r.Float64() >= *s.Probability })
			default:
				return nil, fmt.Errorf("%s: not supported yet under eval_mount and eval_download (tide evaluates paths and take, skip and take_random_sample before any read_*); use mode: ro_mount and load the table in the job (mltable.load)", field)
			}
		}
	}
	return files, nil
}

// relativePath checks an MLTable path names something in its folder.
func relativePath(v string) (string, error) {
	if strings.Contains(v, "://") || strings.HasPrefix(v, "azureml:") || strings.HasPrefix(v, "/") {
		return "", fmt.Errorf("not supported yet: %s is not relative to the MLTable's folder, and tide evaluates only paths in it (use mode: ro_mount and load the table in the job, or give it as an input of its own)", v)
	}
	rel := path.Clean(strings.TrimPrefix(v, "./"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s leaves the MLTable's folder; give its data as an input of its own", v)
	}
	return rel, nil
}

// expandPath lists the files one MLTable path names, sorted.
func expandPath(root fs.FS, kind, rel string) ([]string, error) {
	switch kind {
	case "file":
		info, err := fs.Stat(root, rel)
		if err != nil {
			return nil, fmt.Errorf("%s: no such file", rel)
		}
		if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a file; use folder:", rel)
		}
		return []string{rel}, nil
	case "folder":
		info, err := fs.Stat(root, rel)
		if err != nil || !info.IsDir() {
			return nil, fmt.Errorf("%s: no such folder", rel)
		}
		return walkFiles(root, rel, func(string) bool { return true })
	case "pattern":
		if _, err := path.Match(rel, ""); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		return walkFiles(root, ".", func(f string) bool { return globMatch(strings.Split(rel, "/"), strings.Split(f, "/")) })
	}
	return nil, fmt.Errorf("unknown kind %q: give file, folder or pattern", kind)
}

// walkFiles lists the regular files under dir that keep says to keep.
func walkFiles(root fs.FS, dir string, keep func(string) bool) ([]string, error) {
	var out []string
	err := fs.WalkDir(root, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && p != "MLTable" && keep(p) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// globMatch matches a slash-separated path against a pattern whose **
// segment matches any number of folders.
func globMatch(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if globMatch(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], name[0])
	return ok && globMatch(pat[1:], name[1:])
}

// deliverEvaluated puts the evaluated files of the MLTable in src into
// dst at their paths: for eval_mount, hard links to a node cache entry
// (read-only like it; nothing is copied) where src is one, else copies.
// It says how many files it gave and how many of those it copied.
func (j *job) deliverEvaluated(in api.JobInput, src, dst string) (n, copied int, err error) {
	files, err := evalMLTable(src)
	if err != nil {
		return 0, 0, err
	}
	base, _ := api.EvaluatedMode(in.Mode)
	link := base == "ro_mount" && strings.HasPrefix(src, filepath.Join(j.a.cfg.Dir, "cache")+string(filepath.Separator))
	for _, f := range files {
		from, to := filepath.Join(src, filepath.FromSlash(f)), filepath.Join(dst, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return 0, 0, err
		}
		if link && os.Link(from, to) == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return 0, 0, err
		}
		copied++
	}
	return len(files), copied, nil
}
