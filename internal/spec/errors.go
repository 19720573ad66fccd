package spec

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is one problem with one field of a file or request body.
type FieldError struct {
	File    string // file name as the user gave it; empty for request bodies
	Line    int    // 1-based line; 0 when unknown (e.g. a value from --set)
	Field   string // dotted path, e.g. ssh_settings.admin_username or inputs.x.path
	Message string // what is wrong and what to do
}

// Error formats the error as "file:line: field: message", leaving out the
// parts that are empty.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every problem found in one document, so users fix them all in
// one round.
type Errors []*FieldError

// Error lists the problems, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// AsErrors returns the field errors in err (an Errors or a *FieldError,
// possibly wrapped), or nil when err has none.
func AsErrors(err error) Errors {
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return Errors{fe}
	}
	return nil
}

// collector gathers field errors for one document.
type collector struct {
	file string
	errs Errors
}

func (c *collector) add(line int, field, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{File: c.file, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// err returns the collected errors as an error, or nil when there are none.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs
}
