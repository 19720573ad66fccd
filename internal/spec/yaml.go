package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// MarshalYAML writes v as YAML with the API's field names and order (its
// JSON form's), not Go's; a nil slice is an empty list.
func MarshalYAML(v any) ([]byte, error) {
	n, err := jsonNode(v)
	if err != nil {
		return nil, err
	}
	return encodeNode(n)
}

// EditableYAML writes a resource of kind as the file a user would write:
// its YAML without the fields the server sets (StripStatus's), so it can
// be edited and sent back (PUT) as it is.
func EditableYAML(kind string, v any) ([]byte, error) {
	n, err := jsonNode(v)
	if err != nil {
		return nil, err
	}
	if len(n.Content) == 1 && n.Content[0].Kind == yaml.MappingNode {
		for _, set := range statusFields(kind) {
			for k := range set {
				dropKey(n.Content[0], k)
			}
		}
		dropEmpty(n.Content[0])
	}
	return encodeNode(n)
}

// jsonNode is v's JSON form as a YAML node tree, keeping the JSON's order.
func jsonNode(v any) (*yaml.Node, error) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		v = []any{}
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(j, &n); err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	blockStyle(&n)
	return &n, nil
}

func encodeNode(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("encoding YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// dropKey removes key ("a", or "a.b" in a's mapping) from mapping m; a
// mapping left empty by it goes too.
func dropKey(m *yaml.Node, key string) {
	parent, child, nested := strings.Cut(key, ".")
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != parent {
			continue
		}
		if !nested {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
		if sub := m.Content[i+1]; sub.Kind == yaml.MappingNode {
			dropKey(sub, child)
			if len(sub.Content) == 0 {
				m.Content = append(m.Content[:i], m.Content[i+2:]...)
			}
		}
		return
	}
}

// dropEmpty removes keys whose value is an empty string: the JSON form
// writes fields the file leaves out (a default location) as "".
func dropEmpty(m *yaml.Node) {
	for i := 0; i+1 < len(m.Content); {
		v := m.Content[i+1]
		if v.Kind == yaml.MappingNode {
			dropEmpty(v)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value == "" {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			continue
		}
		i += 2
	}
}

// blockStyle drops the flow and quoting styles that parsing JSON leaves on
// the nodes; the encoder quotes what needs quoting.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
