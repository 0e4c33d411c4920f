// Package jsonschema validates JSON documents against the subset of JSON
// Schema (draft 2020-12) that watchspec's schemas use: type, properties,
// required, additionalProperties, items, enum, const, minimum, pattern,
// oneOf and local $ref ("#/$defs/name"). A schema that uses any other
// keyword is refused rather than half-checked, so a schema cannot say more
// than the tests check.
//
// It exists for the tests that hold watchspec's output to its documented
// schemas (report/summary.schema.json); it is not a general validator.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
)

// Schema is a compiled schema.
type Schema struct {
	root map[string]any
}

// The keywords understood; the annotations are read and ignored.
var (
	keywords    = map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true, "enum": true, "const": true, "minimum": true, "pattern": true, "oneOf": true, "$ref": true, "$defs": true}
	annotations = map[string]bool{"$schema": true, "$id": true, "title": true, "description": true}
)

// Compile reads a schema and checks that it uses only the keywords this
// package understands, and that every $ref resolves.
func Compile(data []byte) (*Schema, error) {
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	s := &Schema{root: root}
	if err := s.lint(root, "#"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Schema) lint(node any, at string) error {
	m, ok := node.(map[string]any)
	if !ok {
		return fmt.Errorf("schema %s: a schema must be an object", at)
	}
	for k, v := range m {
		switch {
		case annotations[k]:
		case !keywords[k]:
			return fmt.Errorf("schema %s: keyword %q is not supported by this validator", at, k)
		case k == "properties" || k == "$defs":
			sub, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("schema %s: %s must be an object", at, k)
			}
			for name, ss := range sub {
				if err := s.lint(ss, at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case k == "items":
			if err := s.lint(v, at+"/items"); err != nil {
				return err
			}
		case k == "additionalProperties":
			if _, ok := v.(bool); !ok {
				if err := s.lint(v, at+"/additionalProperties"); err != nil {
					return err
				}
			}
		case k == "oneOf":
			list, ok := v.([]any)
			if !ok {
				return fmt.Errorf("schema %s: oneOf must be an array", at)
			}
			for i, ss := range list {
				if err := s.lint(ss, fmt.Sprintf("%s/oneOf/%d", at, i)); err != nil {
					return err
				}
			}
		case k == "$ref":
			ref, _ := v.(string)
			if _, err := s.resolve(ref); err != nil {
				return fmt.Errorf("schema %s: %v", at, err)
			}
		case k == "pattern":
			p, _ := v.(string)
			if _, err := regexp.Compile(p); err != nil {
				return fmt.Errorf("schema %s: pattern: %v", at, err)
			}
		}
	}
	return nil
}

func (s *Schema) resolve(ref string) (map[string]any, error) {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only #/$defs/NAME is supported", ref)
	}
	defs, _ := s.root["$defs"].(map[string]any)
	d, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", ref)
	}
	return d, nil
}

// Validate checks one JSON document against the schema. The error lists
// every place that does not conform, by JSON pointer.
func (s *Schema) Validate(doc []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("not one JSON document: data follows it")
	}
	var errs []string
	s.validate(s.root, v, "", &errs)
	if len(errs) > 0 {
		if len(errs) > 20 {
			errs = append(errs[:20], fmt.Sprintf("… and %d more", len(errs)-20))
		}
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func (s *Schema) validate(schema map[string]any, v any, at string, errs *[]string) {
	fail := func(format string, args ...any) {
		where := at
		if where == "" {
			where = "/"
		}
		*errs = append(*errs, where+": "+fmt.Sprintf(format, args...))
	}
	if ref, ok := schema["$ref"].(string); ok {
		d, _ := s.resolve(ref) // lint checked it
		s.validate(d, v, at, errs)
	}
	if t, ok := schema["type"]; ok && !hasType(t, v) {
		fail("want type %v, have %s", t, typeOf(v))
		return
	}
	if c, ok := schema["const"]; ok && !equal(c, v) {
		fail("want %v, have %v", c, v)
	}
	if e, ok := schema["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || equal(x, v)
		}
		if !found {
			fail("%v is not one of %v", v, e)
		}
	}
	if m, ok := schema["minimum"].(json.Number); ok {
		if n, isNum := v.(json.Number); isNum {
			min, _ := m.Float64()
			f, _ := n.Float64()
			if f < min {
				fail("%v is below the minimum %v", n, m)
			}
		}
	}
	if p, ok := schema["pattern"].(string); ok {
		if str, isStr := v.(string); isStr && !regexp.MustCompile(p).MatchString(str) {
			fail("%q does not match %s", str, p)
		}
	}
	if one, ok := schema["oneOf"].([]any); ok {
		matched := 0
		for _, ss := range one {
			var sub []string
			s.validate(ss.(map[string]any), v, at, &sub)
			if len(sub) == 0 {
				matched++
			}
		}
		if matched != 1 {
			fail("matches %d of the oneOf schemas, not exactly 1", matched)
		}
	}
	if obj, ok := v.(map[string]any); ok {
		props, _ := schema["properties"].(map[string]any)
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					fail("required property %q is missing", r)
				}
			}
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if ps, ok := props[k]; ok {
				s.validate(ps.(map[string]any), obj[k], at+"/"+k, errs)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("property %q is not allowed", k)
				}
			case map[string]any:
				s.validate(ap, obj[k], at+"/"+k, errs)
			}
		}
	}
	if arr, ok := v.([]any); ok {
		if items, ok := schema["items"].(map[string]any); ok {
			for i, x := range arr {
				s.validate(items, x, fmt.Sprintf("%s/%d", at, i), errs)
			}
		}
	}
}

func hasType(t any, v any) bool {
	switch t := t.(type) {
	case string:
		return isType(t, v)
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && isType(s, v) {
				return true
			}
		}
	}
	return false
}

func isType(t string, v any) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		if _, err := n.Int64(); err == nil {
			return true
		}
		f, err := n.Float64()
		return err == nil && f == math.Trunc(f)
	}
	return false
}

func typeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// equal compares two decoded JSON values; numbers by value.
func equal(a, b any) bool {
	na, aNum := a.(json.Number)
	nb, bNum := b.(json.Number)
	if aNum && bNum {
		fa, _ := na.Float64()
		fb, _ := nb.Float64()
		return fa == fb
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
