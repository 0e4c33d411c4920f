package jsonschema

import (
	"strings"
	"testing"
)

const schema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["name", "n"],
  "additionalProperties": false,
  "properties": {
    "name": { "type": "string", "pattern": "^[a-z]+$" },
    "n": { "type": "integer", "minimum": 0 },
    "kind": { "enum": ["a", "b"] },
    "v": { "const": 1 },
    "tags": { "type": "array", "items": { "$ref": "#/$defs/tag" } },
    "key": { "oneOf": [{ "type": "string" }, { "type": "object", "required": ["base64"], "additionalProperties": false, "properties": { "base64": { "type": "string" } } }] },
    "counts": { "type": "object", "additionalProperties": { "type": "integer" } },
    "maybe": { "type": ["null", "number"] }
  },
  "$defs": { "tag": { "type": "string" } }
}`

// Every keyword the validator knows rejects what it should, and accepts
// what it should.
func TestValidate(t *testing.T) {
	s, err := Compile([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	ok := []string{
		`{"name": "x", "n": 0}`,
		`{"name": "abc", "n": 3, "kind": "b", "v": 1, "tags": ["t"], "key": {"base64": "AA=="}, "counts": {"x": 2}, "maybe": null}`,
		`{"name": "x", "n": 2.0, "key": "k", "maybe": 1.5}`,
	}
	for _, doc := range ok {
		if err := s.Validate([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
	bad := map[string]string{
		`{"n": 0}`:                                    `required property "name"`,
		`{"name": "x", "n": -1}`:                      "below the minimum",
		`{"name": "x", "n": 1.5}`:                     "want type integer",
		`{"name": "X", "n": 1}`:                       "does not match",
		`{"name": "x", "n": 1, "kind": "c"}`:          "is not one of",
		`{"name": "x", "n": 1, "v": 2}`:               "want 1",
		`{"name": "x", "n": 1, "extra": 1}`:           `property "extra" is not allowed`,
		`{"name": "x", "n": 1, "tags": [1]}`:          "/tags/0: want type string",
		`{"name": "x", "n": 1, "key": 3}`:             "matches 0 of the oneOf",
		`{"name": "x", "n": 1, "counts": {"a": "b"}}`: "/counts/a: want type integer",
		`{"name": "x", "n": 1, "maybe": "s"}`:         "want type [null number]",
		`{"name": "x", "n": 1} {}`:                    "data follows",
		`[`:                                           "not JSON",
	}
	for doc, want := range bad {
		err := s.Validate([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", doc, err, want)
		}
	}
}

// A schema using a keyword the validator does not know is refused, so that
// a schema never says more than the tests check.
func TestCompileRefusesUnknownKeywords(t *testing.T) {
	for doc, want := range map[string]string{
		`{"type": "object", "properties": {"a": {"maxLength": 3}}}`: `keyword "maxLength"`,
		`{"$ref": "#/$defs/missing"}`:                               "no such definition",
		`{"$ref": "other.json"}`:                                    "only #/$defs/NAME",
		`{"pattern": "("}`:                                          "pattern",
	} {
		if _, err := Compile([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", doc, err, want)
		}
	}
}
