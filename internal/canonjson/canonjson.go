// Package canonjson re-encodes a JSON value in one canonical form, so that
// equal values have equal bytes whatever encoder wrote them (Ruby's or
// Go's): object keys sorted, no white space, numbers as written (1 and 1.0
// differ, as they do to Puppet).
package canonjson

import (
	"bytes"
	"encoding/json"
)

// Of returns the canonical form of the JSON value b: nil when b is empty,
// b itself when it is not one JSON value, so that malformed values still
// compare by their bytes.
func Of(b json.RawMessage) []byte {
	if len(b) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(v)
	if err != nil {
		return b
	}
	return out
}
