package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// decodeArgs decodes a tool's arguments, a JSON object, into v, a pointer
// to a struct, refusing unknown fields and values of the wrong type. No
// arguments at all read as {}.
func decodeArgs(args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field == "":
			return fmt.Errorf("arguments must be a JSON object, not %s", te.Value)
		case errors.As(err, &te):
			return fmt.Errorf("argument %q must be %s, not %s", te.Field, jsonKind(te.Type), te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("unknown argument %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("arguments are not valid JSON: more after the object")
	}
	return nil
}

// jsonKind names the JSON type that decodes into t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	}
	return "another type"
}
