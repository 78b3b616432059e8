package puppet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/facts"
)

// checkReads turns the reads a worker reported into the ones the farm
// stores: each value is recomputed with facts.Observe over the request's
// facts, so that facts.Changed over the same facts is false byte for byte.
// The worker's own value must agree (up to number formatting: Ruby writes
// the 1.5 it parsed from 1.50 as 1.5); a disagreement is a recording bug,
// logged and counted. nil stays nil (the worker did not record).
func (e *Engine) checkReads(what string, got *facts.ReadRecord, values map[string]any) (*facts.ReadRecord, error) {
	if got == nil {
		return nil, nil
	}
	if values == nil {
		values = map[string]any{}
	}
	out := &facts.ReadRecord{AlwaysRecompile: got.AlwaysRecompile, Why: got.Why, Clock: got.Clock, ClockWhy: got.ClockWhy,
		Reads: make([]facts.Read, 0, len(got.Reads))}
	for _, r := range got.Reads {
		if r.Path == nil {
			r.Path = []string{}
		}
		want, err := facts.Observe(values, r.Path, r.Kind)
		if err != nil {
			return nil, fmt.Errorf("worker reported an invalid fact read: %w", err)
		}
		if want.Missing != r.Missing || !sameJSON(want.Value, r.Value) {
			e.readMismatches.Add(1)
			e.log.Warn("puppet worker observed a fact other than the request holds (recording bug)", "what", what,
				"path", r.Path, "kind", r.Kind, "worker_value", string(r.Value), "worker_missing", r.Missing,
				"value", string(want.Value), "missing", want.Missing)
		}
		out.Reads = append(out.Reads, want)
	}
	return out, nil
}

// sameJSON reports whether two JSON texts hold the same value, numbers
// compared by value.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, errA := decodeExact(a)
	vb, errB := decodeExact(b)
	if errA != nil || errB != nil {
		return bytes.Equal(a, b)
	}
	return sameValue(va, vb)
}

func decodeExact(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		// Integer and Float differ (1 is not 1.0); within a kind, the
		// value counts, not its spelling (1.50 is 1.5).
		if isFloatLiteral(x) != isFloatLiteral(y) {
			return false
		}
		fx, errX := strconv.ParseFloat(string(x), 64)
		fy, errY := strconv.ParseFloat(string(y), 64)
		return errX == nil && errY == nil && fx == fy
	default:
		return a == b
	}
}

func isFloatLiteral(n json.Number) bool {
	return strings.ContainsAny(string(n), ".eE")
}
