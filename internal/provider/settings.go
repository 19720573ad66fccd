package provider

import (
	"fmt"
	"strings"
	"time"
)

// Readers of a location's provider settings (decoded YAML values): each
// names the setting k in its error and says what it wants.

// SettingString reads a non-empty string.
func SettingString(k string, v any) (string, error) {
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("%s: must be a non-empty string (got %v)", k, v)
	}
	return s, nil
}

// SettingStrings reads a string (split on spaces) or a list of strings.
func SettingStrings(k string, v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return strings.Fields(x), nil
	case []any:
		var out []string
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s: must be a list of strings (got %v)", k, e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: must be a string or a list of strings (got %T)", k, v)
}

// SettingInt reads a whole number.
func SettingInt(k string, v any) (int, error) {
	switch x := v.(type) {
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case float64:
		if x == float64(int(x)) {
			return int(x), nil
		}
	}
	return 0, fmt.Errorf("%s: must be a whole number (got %v)", k, v)
}

// SettingDuration reads a positive duration such as "30s".
func SettingDuration(k string, v any) (time.Duration, error) {
	s, _ := v.(string)
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: must be a positive duration such as \"30s\" (got %v)", k, v)
	}
	return d, nil
}
