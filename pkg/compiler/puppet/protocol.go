package puppet

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/facts"
)

// request is one compile request line sent to worker.rb.
type request struct {
	ID              uint64          `json:"id"`
	Certname        string          `json:"certname"`
	Environment     string          `json:"environment"`
	CodeID          string          `json:"code_id"`
	EnvironmentPath string          `json:"environmentpath"`
	Facts           json.RawMessage `json:"facts"`
	// TrustedExtensions, Classes and Parameters are the node's
	// (nodeinfo.Info): $trusted['extensions'] and the classifier's
	// answer.
	TrustedExtensions map[string]string `json:"trusted_extensions,omitempty"`
	Classes           any               `json:"classes,omitempty"`
	Parameters        json.RawMessage   `json:"parameters,omitempty"`
	// Exported are the resources the other nodes export, for the
	// compile's exported collectors.
	Exported []compiler.ExportedResource `json:"exported,omitempty"`
	// DisableHooks switches fact-read recording hooks off for this compile
	// (tests only).
	DisableHooks []string `json:"disable_hooks,omitempty"`
}

// response is one line worker.rb answers a request with.
type response struct {
	ID      *uint64         `json:"id"`
	OK      bool            `json:"ok"`
	Catalog json.RawMessage `json:"catalog"`
	// Reads are the facts the compile read; absent when the worker does
	// not record (--disable-hooks=all).
	Reads *facts.ReadRecord `json:"reads"`
	// Queries are the PuppetDB queries the compile made, with PuppetDB's
	// answers; absent when it made none or does not record them.
	Queries []queryAnswer `json:"queries"`
	// Exports are the resources the node exports (certname not set);
	// Collects the exported collectors the compile evaluated.
	Exports  []compiler.ExportedResource `json:"exports"`
	Collects []compiler.Collect          `json:"collects"`
	Error    *workerError                `json:"error"`
}

// Kinds of workerError.
const (
	kindCompile = "compile" // Puppet failed to compile the code
	kindInvalid = "invalid" // the request was malformed
	// kindUnavailable: no PuppetDB answered a query; retrying may help
	// and the worker is fine.
	kindUnavailable = "unavailable"
	kindInternal    = "internal" // the worker failed; restart it
)

type workerError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
}

// encodeFacts renders fact values as JSON for Ruby. Facts decoded by
// encoding/json without UseNumber hold every number as float64, which would
// reach Puppet as a Float (1024 becomes 1024.0 in a template); integral
// float64 values that fit exactly are sent as integers. json.Number values
// (from a decoder with UseNumber) pass through unchanged.
func encodeFacts(facts map[string]any) (json.RawMessage, error) {
	if facts == nil {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(intFloats(facts))
	if err != nil {
		return nil, fmt.Errorf("encode facts: %w", err)
	}
	return b, nil
}

// maxExact is 2^53: every integer up to it has an exact float64.
const maxExact = 1 << 53

func intFloats(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = intFloats(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = intFloats(e)
		}
		return s
	case float64:
		if x == math.Trunc(x) && math.Abs(x) <= maxExact {
			return int64(x)
		}
		return x
	case float32:
		return intFloats(float64(x))
	default:
		return v
	}
}
