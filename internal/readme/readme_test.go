// Package readme checks the README's command blocks (issue 21, defect 12).
//
// This is the short form: every ```sh block must be valid bash, and every
// repository or shared-data path a block names must exist, so a renamed file
// or a typo in a pasted command fails here instead of on a new user's machine.
// Running the blocks end to end (server, jobs, apt-get installs) is not done
// here yet.
package readme

import (
	"bufio"
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

func shellBlocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && (l == "```sh" || l == "```bash"):
			cur = &block{line: n}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s: the block opened at line %d is never closed", path, cur.line)
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
