// Package readme checks the README's command blocks (issue 21, defect 12).
//
// TestReadmeBlocks is the short form: every ```sh block must be valid bash, and every
// repository or shared-data path a block names must exist, so a renamed file
// or a typo in a pasted command fails here instead of on a new user's machine.
// TestReadmeBlocksRun (run_test.go) is the full form: the blocks run, in
// order, as a new user pastes them.
package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type block struct {
	line int // README line of the opening fence
	text string
}

// shellBlocks returns the README's sh and bash blocks, those indented in a
// list item too (their indent removed).
func shellBlocks(t *testing.T, path string) []block {
	t.Helper()
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	fence := regexp.MustCompile("^(\\s*)```(\\w*)\\s*$")
	var out []block
	var cur []string
	indent, lang, start, in := "", "", 0, false
	for i, l := range strings.Split(string(readme), "\n") {
		m := fence.FindStringSubmatch(l)
		switch {
		case m != nil && !in:
			in, lang, indent, start, cur = true, m[2], m[1], i+1, nil
		case m != nil && in:
			in = false
			if lang == "sh" || lang == "bash" {
				out = append(out, block{line: start, text: strings.Join(cur, "\n") + "\n"})
			}
		case in:
			cur = append(cur, strings.TrimPrefix(l, indent))
		}
	}
	if in {
		t.Fatalf("%s: the block opened at line %d is never closed", path, start)
	}
	return out
}

// pathArg matches repository-relative and shared-data paths in commands.
var pathArg = regexp.MustCompile(`(?:\.\./shared|docs|examples|deploy|sdk)/[A-Za-z0-9_./-]+`)

func TestReadmeBlocks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(t, filepath.Join(root, "README.md"))
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```sh blocks")
	}
	for _, b := range blocks {
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(b.text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README.md:%d: the block is not valid bash: %v\n%s", b.line, err, out)
		}
		for _, p := range pathArg.FindAllString(b.text, -1) {
			p = strings.TrimRight(p, ".")
			if strings.HasPrefix(p, "../shared") {
				if _, err := os.Stat(filepath.Join(root, "..", "shared")); err != nil {
					continue // shared data is not on this machine
				}
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("README.md:%d: the block names %s, which does not exist", b.line, p)
			}
		}
	}
}
