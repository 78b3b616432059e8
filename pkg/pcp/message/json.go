package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// object is a JSON object read field by field: encoding/json's struct
// decoding matches names case-insensitively and turns null into a zero
// value, and a broker must not accept either.
type object struct {
	version string
	fields  map[string]json.RawMessage
}

func parseObject(version, what string, text []byte) (object, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(text, &fields); err != nil {
		return object{}, fmt.Errorf("pcp %s: %w: %s is not valid JSON: %v", version, ErrEnvelope, what, err)
	}
	if fields == nil { // the text was null
		return object{}, fmt.Errorf("pcp %s: %w: %s is not a JSON object", version, ErrEnvelope, what)
	}
	return object{version: version, fields: fields}, nil
}

func (o object) errorf(format string, args ...any) error {
	return fmt.Errorf("pcp %s: %w: "+format, append([]any{o.version, ErrEnvelope}, args...)...)
}

// take removes a field and reports whether it was there.
func (o object) take(name string) (json.RawMessage, bool) {
	raw, ok := o.fields[name]
	delete(o.fields, name)
	return raw, ok
}

func (o object) str(name string, required bool) (string, error) {
	raw, ok := o.take(name)
	if !ok {
		if required {
			return "", o.errorf("the required field %q is missing", name)
		}
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", o.errorf("the field %q is not a string", name)
	}
	return s, nil
}

func (o object) uri(name string, required bool) (string, error) {
	_, present := o.fields[name]
	s, err := o.str(name, required)
	if err != nil || !present {
		return s, err
	}
	if _, err := ParseURI(s); err != nil {
		return "", o.errorf("the field %q: %v", name, err)
	}
	return s, nil
}

func (o object) uris(name string) ([]string, error) {
	raw, ok := o.take(name)
	if !ok {
		return nil, o.errorf("the required field %q is missing", name)
	}
	var list []string
	if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
		return nil, o.errorf("the field %q is not an array of strings", name)
	}
	for i, s := range list {
		if _, err := ParseURI(s); err != nil {
			return nil, o.errorf("the field %q, item %d: %v", name, i, err)
		}
	}
	return list, nil
}

func (o object) boolean(name string) (bool, error) {
	raw, ok := o.take(name)
	if !ok {
		return false, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, o.errorf("the field %q is not a boolean", name)
}

// rest returns the fields not taken, compacted; nil when there are none.
func (o object) rest() map[string][]byte {
	if len(o.fields) == 0 {
		return nil
	}
	extra := make(map[string][]byte, len(o.fields))
	for name, raw := range o.fields {
		var b bytes.Buffer
		_ = json.Compact(&b, raw) // raw was accepted by Unmarshal
		extra[name] = b.Bytes()
	}
	return extra
}

// writer builds a JSON object in a fixed field order.
type writer struct {
	buf   []byte
	first bool
}

func newWriter(dst []byte) *writer { return &writer{buf: append(dst, '{'), first: true} }

func (w *writer) key(name string) {
	if !w.first {
		w.buf = append(w.buf, ',')
	}
	w.first = false
	w.buf = appendString(w.buf, name)
	w.buf = append(w.buf, ':')
}

func (w *writer) str(name, value string) {
	w.key(name)
	w.buf = appendString(w.buf, value)
}

func (w *writer) raw(name string, value []byte) {
	w.key(name)
	w.buf = append(w.buf, value...)
}

func (w *writer) strs(name string, values []string) {
	w.key(name)
	w.buf = append(w.buf, '[')
	for i, v := range values {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = appendString(w.buf, v)
	}
	w.buf = append(w.buf, ']')
}

// extra writes the uninterpreted fields in name order, refusing names the
// envelope already has and values that are not JSON.
func (w *writer) extra(version string, extra map[string][]byte, known []string) error {
	names := make([]string, 0, len(extra))
	for name := range extra {
		if slices.Contains(known, name) {
			return fmt.Errorf("pcp %s: %w: Extra holds the envelope field %q", version, ErrEnvelope, name)
		}
		if !json.Valid(extra[name]) {
			return fmt.Errorf("pcp %s: %w: Extra[%q] is not valid JSON", version, ErrEnvelope, name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		var b bytes.Buffer
		_ = json.Compact(&b, extra[name])
		w.raw(name, b.Bytes())
	}
	return nil
}

func (w *writer) close() []byte { return append(w.buf, '}') }

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}
