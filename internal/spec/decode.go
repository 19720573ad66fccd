package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree by hand instead of decoding into structs:
// that is how every error carries its line, names its field path, suggests
// the field the user meant, and how all problems are reported at once.
type decoder struct {
	collector
	lines    map[string]int  // field path -> line of its value, for semantic errors
	setPaths map[string]bool // field paths whose value came from --set
}

func newDecoder(file string) *decoder {
	return &decoder{collector: collector{file: file}, lines: map[string]int{}, setPaths: map[string]bool{}}
}

// setSource is the File of errors about --set overrides, so users look at
// their command line rather than at the file.
const setSource = "--set"

// add records a problem; one about a value that came from --set names
// --set instead of the file.
func (d *decoder) add(line int, field, format string, args ...any) {
	if line == 0 && d.setPaths[field] {
		d.errs = append(d.errs, &FieldError{File: setSource, Field: field, Message: fmt.Sprintf(format, args...)})
		return
	}
	d.collector.add(line, field, format, args...)
}

func (d *decoder) setError(format string, args ...any) {
	d.errs = append(d.errs, &FieldError{File: setSource, Message: fmt.Sprintf(format, args...)})
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parse reads one YAML (or JSON) document, applies the --set overrides and
// returns its top-level mapping, or nil after recording why it cannot.
func (d *decoder) parse(data []byte, sets []string) *yaml.Node {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		d.syntax(err)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add(extra.Line, "", "the file holds more than one YAML document (---); put one resource per file")
		return nil
	} else if !errors.Is(err, io.EOF) {
		d.syntax(err)
		return nil
	}
	var root *yaml.Node
	switch {
	case doc.Kind == 0 || len(doc.Content) == 0:
		if len(sets) == 0 {
			d.add(0, "", "the file is empty; it must be a mapping of fields such as name: and type:")
			return nil
		}
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	default:
		root = resolve(doc.Content[0])
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	if root.Kind != yaml.MappingNode {
		d.add(root.Line, "", "the top level must be a mapping of fields (got %s)", describe(root))
		return nil
	}
	for _, s := range sets {
		d.applySet(root, s)
	}
	d.refuseNUL(root, "")
	if len(d.errs) > 0 {
		return nil
	}
	return root
}

// refuseNUL records every key or value under n that holds a NUL character
// (JSON's \u0000): no store keeps one (PostgreSQL's jsonb refuses it), and
// no field means anything with it.
func (d *decoder) refuseNUL(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.ScalarNode:
		if strings.ContainsRune(n.Value, 0) {
			d.add(n.Line, path, "holds a NUL character (\\u0000), which tide cannot keep; remove it")
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			if strings.ContainsRune(k.Value, 0) {
				d.add(k.Line, p, "the key holds a NUL character (\\u0000), which tide cannot keep; remove it")
				continue
			}
			d.refuseNUL(v, p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.refuseNUL(c, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func (d *decoder) syntax(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	d.add(line, "", "invalid YAML: %s", msg)
}

// applySet applies one "--set path=value" override. The value is typed as a
// YAML scalar (3 is an integer, true a boolean, anything else a string);
// values that would parse as a list or mapping are kept as strings, so
// "--set description=a: b" means what it says.
func (d *decoder) applySet(root *yaml.Node, set string) {
	key, value, ok := strings.Cut(set, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		d.setError("%q: want path=value, e.g. max_instances=3 or tags.team=ml", set)
		return
	}
	parts := strings.Split(key, ".")
	for _, p := range parts {
		if p == "" {
			d.setError("%q: empty path segment in %q", set, key)
			return
		}
	}
	val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	var parsed yaml.Node
	if err := yaml.Unmarshal([]byte(value), &parsed); err == nil && len(parsed.Content) == 1 && parsed.Content[0].Kind == yaml.ScalarNode {
		val = parsed.Content[0]
		val.Line, val.Column = 0, 0
	}
	d.setPaths[key] = true
	node := root
	for i, p := range parts {
		last := i == len(parts)-1
		var found *yaml.Node
		for j := 0; j+1 < len(node.Content); j += 2 {
			if node.Content[j].Value == p {
				if last {
					node.Content[j+1] = val
					return
				}
				found = resolve(node.Content[j+1])
				if found.Kind == yaml.ScalarNode && found.Tag == "!!null" {
					found = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
					node.Content[j+1] = found
				}
				break
			}
		}
		if last {
			node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p}, val)
			return
		}
		if found == nil {
			found = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p}, found)
		}
		if found.Kind != yaml.MappingNode {
			d.setError("%q: %s is not a mapping (it is %s)", set, strings.Join(parts[:i+1], "."), describe(found))
			return
		}
		node = found
	}
}

// resolve follows aliases (*name) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// describe names what a node is, for "got ..." in messages.
func describe(n *yaml.Node) string {
	n = resolve(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "null"
	case n.Tag == "!!str" || n.Tag == "":
		return strconv.Quote(n.Value)
	default:
		return n.Value
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// mapping calls visit for each key of the mapping n (at path), in file
// order. visit returns false for keys it does not know; those are reported as
// unknown, with a suggestion among known. Duplicate keys are errors.
func (d *decoder) mapping(n *yaml.Node, path string, known []string, visit func(key string, v *yaml.Node, fieldPath string) bool) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.add(n.Line, path, "must be a mapping, got %s", describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			d.add(k.Line, path, "field names must be plain strings, got %s", describe(k))
			continue
		}
		if first, dup := seen[key]; dup {
			d.add(k.Line, join(path, key), "defined twice (first on line %d); keep one", first)
			continue
		}
		seen[key] = k.Line
		fp := join(path, key)
		d.lines[fp] = lineOf(v, k)
		if !visit(key, v, fp) {
			d.unknown(k, path, key, known)
		}
	}
}

// lineOf is the line a field's problems are reported on: its key's, which is
// where a block mapping or list value starts too from the reader's view.
func lineOf(v, k *yaml.Node) int {
	if k.Line > 0 {
		return k.Line
	}
	if rv := resolve(v); rv != nil {
		return rv.Line
	}
	return 0
}

func (d *decoder) unknown(k *yaml.Node, path, key string, known []string) {
	if s := suggest(key, known); s != "" {
		d.add(k.Line, path, "unknown field %q; did you mean %q?", key, s)
		return
	}
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	d.add(k.Line, path, "unknown field %q; known fields: %s", key, strings.Join(sorted, ", "))
}

// suggest returns the known name closest to key when it is close enough to
// be a typo, or "".
func suggest(key string, known []string) string {
	best, bestD := "", 1<<30
	lk := strings.ToLower(key)
	for _, k := range known {
		if dist := levenshtein(lk, strings.ToLower(k)); dist < bestD {
			best, bestD = k, dist
		}
	}
	limit := 2
	if len(key) <= 4 {
		limit = 1
	}
	if bestD <= limit {
		return best
	}
	if len(lk) >= 4 {
		for _, k := range known {
			if lkn := strings.ToLower(k); strings.HasPrefix(lkn, lk) || strings.HasPrefix(lk, lkn) {
				return k
			}
		}
	}
	return ""
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// str decodes a string field. Numbers and booleans are taken as written
// (name: 123 is the string "123"); null means absent.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if isNull(n) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		d.add(n.Line, path, "must be a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// integer decodes an integer field; "3" in quotes is accepted as Azure's CLI
// accepts it. null means absent.
func (d *decoder) integer(n *yaml.Node, path string) (int, bool) {
	n = resolve(n)
	if isNull(n) {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode {
		switch n.Tag {
		case "!!int":
			var v int
			if err := n.Decode(&v); err == nil {
				return v, true
			}
		case "!!str", "":
			if v, err := strconv.Atoi(strings.TrimSpace(n.Value)); err == nil {
				return v, true
			}
		}
	}
	d.add(n.Line, path, "must be an integer, got %s", describe(n))
	return 0, false
}

// boolean decodes a boolean field; "true"/"false" in quotes are accepted.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n = resolve(n)
	if isNull(n) {
		return false, false
	}
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!bool" {
			var v bool
			if err := n.Decode(&v); err == nil {
				return v, true
			}
		}
		switch strings.ToLower(strings.TrimSpace(n.Value)) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	d.add(n.Line, path, "must be true or false, got %s", describe(n))
	return false, false
}

// strMap decodes a mapping of strings (tags, environment_variables); numbers
// and booleans are kept as written, null values become "".
func (d *decoder) strMap(n *yaml.Node, path string) map[string]string {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	out := map[string]string{}
	d.mapping(n, path, nil, func(key string, v *yaml.Node, fp string) bool {
		if key == "" {
			d.add(d.lines[fp], path, "keys must not be empty")
			return true
		}
		rv := resolve(v)
		if isNull(rv) {
			out[key] = ""
			return true
		}
		if rv.Kind != yaml.ScalarNode {
			d.add(rv.Line, fp, "must be a string, number or boolean, got %s", describe(rv))
			return true
		}
		out[key] = rv.Value
		return true
	})
	return out
}

// readOnly reports a status field the user may not set. Zero values are
// ignored: a client that marshals a whole api.Compute or api.Job sends them.
func (d *decoder) readOnly(v *yaml.Node, fp string) {
	if isZero(v, 0) {
		return
	}
	d.add(d.lines[fp], fp, "read-only; set by the server (remove it from the file)")
}

func isZero(n *yaml.Node, depth int) bool {
	n = resolve(n)
	if n == nil || depth > 3 {
		return n == nil
	}
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return true
		case "!!int", "!!float":
			f, err := strconv.ParseFloat(n.Value, 64)
			return err == nil && f == 0
		case "!!bool":
			return n.Value == "false"
		}
		return n.Value == "" || n.Value == "0001-01-01T00:00:00Z"
	case yaml.SequenceNode:
		return len(n.Content) == 0
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if !isZero(n.Content[i], depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// notSupported reports a real Azure ML field that tide does not implement.
func (d *decoder) notSupported(fp, what string) {
	d.add(d.lines[fp], fp, "%s", what)
}

func errorf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
