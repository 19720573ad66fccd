package server

import (
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// openapiDoc builds the OpenAPI 3 document from the route table, so the
// document describes exactly the routes the server serves.
func (s *Server) openapiDoc() map[string]any {
	schemas := map[string]any{}
	paths := map[string]any{}
	param := regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)
	for _, rt := range s.routes() {
		p := param.ReplaceAllString(rt.pattern, "{$1}")
		item, _ := paths[p].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[p] = item
		}
		op := map[string]any{
			"summary":     rt.summary,
			"operationId": strings.ToLower(rt.method) + operationName(p),
		}
		var params []any
		for _, m := range param.FindAllStringSubmatch(rt.pattern, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		op["x-tide-auth"] = string(rt.auth)
		if perm, ok := rt.auth.perm(); ok {
			op["description"] = fmt.Sprintf("Needs %s in the workspace: one of the roles %s.", perm, strings.Join(service.RolesWith(perm), ", "))
		}
		if rt.watch {
			d, _ := op["description"].(string)
			op["description"] = strings.TrimSpace(d + " With Accept: text/event-stream the answer is followed: an `update` event with the same JSON now and whenever it changes, a `problem` event (then the end) if it becomes an error; the stream ends after a few minutes and EventSource reconnects.")
		}
		switch rt.auth {
		case authPublic:
			op["security"] = []any{}
		case authNode:
			op["tags"] = []string{"agent"}
		}
		if rt.request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(rt.request), schemas)},
			}}
		}
		status := rt.status
		if status == 0 {
			status = 200
		}
		resp := map[string]any{"description": http.StatusText(status)}
		content := map[string]any{}
		if rt.response != nil {
			content["application/json"] = map[string]any{"schema": schemaOf(reflect.TypeOf(rt.response), schemas)}
		}
		if rt.sse || rt.watch {
			content["text/event-stream"] = map[string]any{"schema": map[string]any{"type": "string"}}
		}
		if len(content) > 0 {
			resp["content"] = content
		}
		problem := map[string]any{"application/problem+json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Problem"}}}
		responses := map[string]any{
			strconv.Itoa(status): resp,
			"default":            map[string]any{"description": "An error", "content": problem},
		}
		if rt.submit {
			responses["429"] = map[string]any{
				"description": "Refused by the workspace's admission limits (limits.submit_rate, limits.max_queued_jobs); nothing was stored: send it again after Retry-After",
				"headers":     map[string]any{"Retry-After": map[string]any{"description": "Seconds to wait", "schema": map[string]any{"type": "integer"}}},
				"content":     problem,
			}
		}
		op["responses"] = responses
		item[strings.ToLower(rt.method)] = op
	}
	schemaOf(reflect.TypeOf(api.Problem{}), schemas)
	return map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "tide", "version": "v1", "description": "Self-hosted elastic compute for machine-learning jobs, with Azure ML's compute and job model."},
		"paths":   paths,
		"components": map[string]any{
			"schemas":         schemas,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
		"security": []any{map[string]any{"bearer": []any{}}},
	}
}

func operationName(p string) string {
	var b strings.Builder
	for _, part := range strings.Split(p, "/") {
		part = strings.Trim(part, "{}")
		if part == "" || part == "v1" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + strings.ReplaceAll(part[1:], ".", ""))
	}
	return b.String()
}

var timeType = reflect.TypeOf(time.Time{})

// schemaOf returns a JSON schema for t, adding named struct types to schemas.
func schemaOf(t reflect.Type, schemas map[string]any) map[string]any {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}
	}
	if t.Implements(reflect.TypeOf((*interface{ MarshalJSON() ([]byte, error) })(nil)).Elem()) && t.Kind() == reflect.Struct {
		// Types with custom JSON (a literal or an object, a reference or an
		// inline object) accept either shape.
		return map[string]any{"description": t.Name() + ": a string, number or object"}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), schemas)}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		name := schemaName(t)
		if _, ok := schemas[name]; !ok {
			schemas[name] = map[string]any{} // break cycles
			props := map[string]any{}
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				tag := f.Tag.Get("json")
				key := strings.Split(tag, ",")[0]
				if !f.IsExported() || key == "-" {
					continue
				}
				if key == "" {
					key = f.Name
				}
				props[key] = schemaOf(f.Type, schemas)
			}
			schemas[name] = map[string]any{"type": "object", "properties": props}
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}

func schemaName(t reflect.Type) string {
	n := t.Name()
	if i := strings.Index(n, "["); i >= 0 {
		// List[github.com/.../api.Compute] -> ComputeList
		inner := n[i+1 : len(n)-1]
		inner = inner[strings.LastIndex(inner, ".")+1:]
		return inner + n[:i]
	}
	return n
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, s.openapiDoc())
}
