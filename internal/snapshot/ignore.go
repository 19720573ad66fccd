package snapshot

import (
	"bufio"
	"bytes"
	"regexp"
	"strings"
)

// rule is one line of an ignore file.
type rule struct {
	re      *regexp.Regexp
	negate  bool
	dirOnly bool
}

// ruleSet is the rules of one ignore file; base is the slash path of its
// folder relative to the snapshot root ("" for the root).
type ruleSet struct {
	base  string
	rules []rule
}

// parseIgnore reads an ignore file with gitignore's syntax: blank lines
// and '#' comments are skipped, '!' negates, a trailing '/' matches only
// folders, a pattern with a '/' before its end is anchored to the file's
// folder, '*' and '?' do not match '/', '**' matches across folders, and
// '\' escapes the next character.
func parseIgnore(base string, data []byte) ruleSet {
	rs := ruleSet{base: base}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.HasSuffix(line, "\\ ") {
			line = strings.TrimRight(line[:len(line)-2], " ") + "\\ "
		} else {
			line = strings.TrimRight(line, " \t")
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r rule
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		} else if strings.HasPrefix(line, "\\!") || strings.HasPrefix(line, "\\#") {
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		anchored := strings.Contains(line, "/")
		line = strings.TrimPrefix(line, "/")
		re, err := regexp.Compile(patternRE(line, anchored))
		if err != nil {
			continue // git ignores patterns it cannot read, too
		}
		r.re = re
		rs.rules = append(rs.rules, r)
	}
	return rs
}

// patternRE turns a gitignore pattern into a regular expression over slash
// paths relative to the ignore file's folder.
func patternRE(p string, anchored bool) string {
	var b strings.Builder
	b.WriteString("^")
	if !anchored {
		b.WriteString("(?:.*/)?")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && strings.HasPrefix(p[i:], "**"):
			atStart := i == 0 || p[i-1] == '/'
			rest := p[i+2:]
			switch {
			case atStart && strings.HasPrefix(rest, "/"):
				b.WriteString("(?:.*/)?") // "**/": zero or more folders
				i += 2
			case atStart && rest == "":
				b.WriteString(".*") // trailing "/**": everything inside
				i++
			default:
				b.WriteString("[^/]*")
				i++
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(p[i+1:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := p[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return b.String()
}

// ignored applies the rule sets (parents first) to a slash path relative
// to the root; the last matching rule decides, as in git.
func ignored(sets []ruleSet, rel string, isDir bool) bool {
	out := false
	for _, rs := range sets {
		p := rel
		if rs.base != "" {
			var ok bool
			if p, ok = strings.CutPrefix(rel, rs.base+"/"); !ok {
				continue
			}
		}
		for _, r := range rs.rules {
			if r.dirOnly && !isDir {
				continue
			}
			if r.re.MatchString(p) {
				out = !r.negate
			}
		}
	}
	return out
}
