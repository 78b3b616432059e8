package puppetdbref

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// absent stands for a field one side does not have.
const absent = "(absent)"

// difference is one place where the normalized holdings differ.
type difference struct {
	Path      string // e.g. reports[1].resource_events["Exec[check-fixed] returns"].message
	Reference any    // Puppet Server's value (or absent)
	Farm      any    // the farm's value (or absent)
}

func (d difference) String() string {
	return fmt.Sprintf("%s: reference %s, farm %s", d.Path, short(d.Reference), short(d.Farm))
}

// short renders a value as compact JSON, cut to a readable length.
func short(v any) string {
	if v == absent {
		return absent
	}
	b := bytes.TrimSuffix(canonicalLine(v), []byte("\n"))
	if len(b) > 400 {
		return string(b[:400]) + "..."
	}
	return string(b)
}

// diff returns where farm differs from ref (both normalized JSON values),
// in path order. Lists of the same length are compared element by
// element; lists of different lengths report their lengths and the
// elements only one side has.
func diff(path string, ref, farm any) []difference {
	switch r := ref.(type) {
	case map[string]any:
		f, ok := farm.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(r)+len(f))
		for k := range r {
			keys = append(keys, k)
		}
		for k := range f {
			if _, ok := r[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		var out []difference
		for _, k := range keys {
			rv, rok := r[k]
			fv, fok := f[k]
			p := path + "." + k
			if strings.ContainsAny(k, " .[]\"") {
				p = fmt.Sprintf("%s[%q]", path, k)
			}
			switch {
			case !rok:
				out = append(out, difference{p, absent, fv})
			case !fok:
				out = append(out, difference{p, rv, absent})
			default:
				out = append(out, diff(p, rv, fv)...)
			}
		}
		return out
	case []any:
		f, ok := farm.([]any)
		if !ok {
			break
		}
		if len(r) == len(f) {
			var out []difference
			for i := range r {
				out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), r[i], f[i])...)
			}
			return out
		}
		out := []difference{{path + ".length", len(r), len(f)}}
		onlyR, onlyF := multisetDiff(r, f)
		for _, v := range onlyR {
			out = append(out, difference{path + "[only in reference]", v, absent})
		}
		for _, v := range onlyF {
			out = append(out, difference{path + "[only in farm]", absent, v})
		}
		return out
	}
	if equalJSON(ref, farm) {
		return nil
	}
	return []difference{{path, ref, farm}}
}

// multisetDiff returns the elements of a not in b and of b not in a,
// counting repeats, compared as JSON.
func multisetDiff(a, b []any) (onlyA, onlyB []any) {
	count := map[string]int{}
	for _, v := range b {
		count[string(mustJSON(v))]++
	}
	for _, v := range a {
		k := string(mustJSON(v))
		if count[k] > 0 {
			count[k]--
			continue
		}
		onlyA = append(onlyA, v)
	}
	count = map[string]int{}
	for _, v := range a {
		count[string(mustJSON(v))]++
	}
	for _, v := range b {
		k := string(mustJSON(v))
		if count[k] > 0 {
			count[k]--
			continue
		}
		onlyB = append(onlyB, v)
	}
	return onlyA, onlyB
}

// canonicalLine renders v as one line of JSON, <placeholders> as they are.
func canonicalLine(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only JSON values reach here
	}
	return b.Bytes()
}

func equalJSON(a, b any) bool { return string(mustJSON(a)) == string(mustJSON(b)) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only JSON values reach here
	}
	return b
}
