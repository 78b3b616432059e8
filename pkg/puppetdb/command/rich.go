package command

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Rich data. The farm's catalogs and exports hold resource parameters as
// Puppet's rich data JSON (application/vnd.puppet.rich+json): plain JSON
// data as it is, every other value as {"__ptype": TYPE, "__pvalue": ...}
// or {"__ptype": TYPE, attribute: ...}. The catalog terminus sends PuppetDB
// the same parameters through ToStringifiedConverter instead (the
// :stringify_rich context): plain data as it is, every other value as the
// text Ruby's to_s gives it. A stringifier makes that text from the rich
// JSON.
//
// Exact for what Puppet writes into catalogs: undef, default, hashes with
// keys that are not strings, symbols, regexps, Binary, Timestamp, Timespan,
// SemVer, SemVerRange, URI, Deferred and other objects with data
// attributes, and types without parameters or with the common ones
// (Integer[1, 2], Optional[String], Enum['a', 'b'], Variant[...]). A
// Sensitive value inside a parameter becomes "#<Sensitive [value
// redacted]:N>" as in Ruby, N counting them where Ruby writes an object id
// (which differs on every compile). A type this package does not know
// how to write with its parameters is written by its name alone.

// stringifier converts rich data JSON values as ToStringifiedConverter
// converts the values they stand for. Its zero value is ready; one
// stringifier serves one catalog (it numbers the Sensitive values).
type stringifier struct {
	sensitive int
}

// value is ToStringifiedConverter#to_data of the value v holds.
func (s *stringifier) value(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = s.value(e)
		}
		return out
	case map[string]any:
		if t, ok := v[pcoreType].(string); ok {
			return s.rich(t, v)
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			// A hash with a key "__pvalue" (rich data only marks
			// "__ptype") is written as one with keys that are not strings.
			out[stringifiedKey(k)] = s.value(e)
		}
		return out
	}
	return v
}

// rich converts the rich value v of Pcore type t.
func (s *stringifier) rich(t string, v map[string]any) any {
	pv, hasValue := v[pcoreValue]
	switch t {
	case "Hash":
		pairs, _ := pv.([]any)
		out := make(map[string]any, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			out[stringifiedKey(s.key(pairs[i]))] = s.value(pairs[i+1])
		}
		return out
	case "Default":
		return "default"
	case "Sensitive":
		s.sensitive++
		return fmt.Sprintf("#<Sensitive [value redacted]:%d>", s.sensitive)
	case "Regexp":
		src, _ := pv.(string)
		return regexpString(src)
	}
	if str, ok := pv.(string); ok && hasValue {
		// Symbol, Binary (Base64), Timestamp, Timespan, SemVer,
		// SemVerRange, URI: the value is written as its to_s.
		return str
	}
	return puppetString(v)
}

// key is the string ToStringifiedConverter makes of the key k of a hash
// (a rich data JSON value): Ruby's to_s of what it stands for.
func (s *stringifier) key(k any) string {
	switch k := k.(type) {
	case string:
		return k
	case map[string]any:
		if t, ok := k[pcoreType].(string); ok {
			if str, ok := s.rich(t, k).(string); ok {
				return str
			}
			// A hash as a key: inspect of its stringified form.
			return rubyInspect(s.rich(t, k))
		}
	}
	return rubyToS(s.value(k))
}

// regexpString is PRegexpType.regexp_to_s_with_delimiters.
func regexpString(src string) string {
	return "/" + strings.ReplaceAll(src, "/", `\/`) + "/"
}

// puppetString is Puppet's TypeFormatter text of the rich data JSON value
// v: what to_s gives an object (Deferred({'name' => 'f', 'arguments' =>
// [1]})) or a type (Integer[1, 2]), and the values inside them.
func puppetString(v any) string {
	var b strings.Builder
	writePuppet(&b, v)
	return b.String()
}

func writePuppet(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("undef")
	case bool:
		fmt.Fprint(b, v)
	case json.Number:
		b.WriteString(rubyNumber(v))
	case string:
		writePuppetQuote(b, v)
	case []any:
		writePuppetList(b, v)
	case map[string]any:
		t, ok := v[pcoreType].(string)
		if !ok {
			writePuppetHash(b, sortedKeys(v), func(k string) any { return k }, func(k string) any { return v[k] })
			return
		}
		writePuppetRich(b, t, v)
	default:
		fmt.Fprint(b, v)
	}
}

func writePuppetList(b *strings.Builder, list []any) {
	b.WriteByte('[')
	for i, e := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		writePuppet(b, e)
	}
	b.WriteByte(']')
}

func writePuppetHash[K any](b *strings.Builder, keys []K, key func(K) any, val func(K) any) {
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		writePuppet(b, key(k))
		b.WriteString(" => ")
		writePuppet(b, val(k))
	}
	b.WriteByte('}')
}

// writePuppetRich writes a rich value of Pcore type t.
func writePuppetRich(b *strings.Builder, t string, v map[string]any) {
	pv, hasValue := v[pcoreValue]
	switch t {
	case "Default":
		b.WriteString("default")
		return
	case "Hash":
		pairs, _ := pv.([]any)
		idx := make([]int, 0, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			idx = append(idx, i)
		}
		writePuppetHash(b, idx, func(i int) any { return pairs[i] }, func(i int) any { return pairs[i+1] })
		return
	case "Regexp":
		src, _ := pv.(string)
		b.WriteString(regexpString(src))
		return
	case "Sensitive":
		b.WriteString("Instance of Sensitive")
		if name := dataTypeName(pv); name != "" {
			b.WriteString("[" + name + "]")
		}
		return
	case "Binary":
		b.WriteString("Instance of Binary")
		return
	case "Symbol":
		s, _ := pv.(string)
		b.WriteString(s)
		return
	}
	if strings.HasPrefix(t, "Pcore::") && strings.HasSuffix(t, "Type") {
		writePuppetType(b, t, v)
		return
	}
	if s, ok := pv.(string); ok && hasValue {
		writePuppetQuote(b, s)
		return
	}
	// An object: Type({'attribute' => value, ...}), attributes in the
	// order of the type's definition, which for Deferred is name,
	// arguments; others in key order.
	keys := make([]string, 0, len(v))
	for _, k := range []string{"name", "arguments"} {
		if _, ok := v[k]; ok {
			keys = append(keys, k)
		}
	}
	for _, k := range sortedKeys(v) {
		if k != pcoreType && k != "name" && k != "arguments" {
			keys = append(keys, k)
		}
	}
	b.WriteString(t + "(")
	writePuppetHash(b, keys, func(k string) any { return k }, func(k string) any { return v[k] })
	b.WriteByte(')')
}

// dataTypeName is the generalized type Puppet infers for a scalar.
func dataTypeName(v any) string {
	switch v := v.(type) {
	case string:
		return "String"
	case bool:
		return "Boolean"
	case json.Number:
		if isIntegerLiteral(string(v)) {
			return "Integer"
		}
		return "Float"
	}
	return ""
}

// writePuppetType writes a type, given as Pcore::<Name>Type with its
// parameters as attributes.
func writePuppetType(b *strings.Builder, t string, v map[string]any) {
	name := strings.TrimSuffix(strings.TrimPrefix(t, "Pcore::"), "Type")
	var params []any
	switch name {
	case "Integer", "Float":
		from, to := v["from"], v["to"]
		switch {
		case to != nil:
			if from == nil {
				from = map[string]any{pcoreType: "Default"}
			}
			params = []any{from, to}
		case from != nil:
			params = []any{from}
		}
	case "Optional", "NotUndef", "Type", "Iterable", "Iterator", "Sensitive":
		if inner, ok := v["type"].(map[string]any); ok {
			params = []any{inner}
		}
	case "Enum":
		params, _ = v["values"].([]any)
	case "Variant":
		params, _ = v["types"].([]any)
	case "Array":
		if e, ok := v["element_type"].(map[string]any); ok {
			params = []any{e}
		}
	}
	b.WriteString(name)
	if len(params) > 0 {
		l := strings.Builder{}
		writePuppetList(&l, params)
		b.WriteString(l.String())
	}
}

// writePuppetQuote is StringConverter#puppet_quote: single quotes, or
// double quotes with escapes when the string holds control characters.
func writePuppetQuote(b *strings.Builder, s string) {
	for _, r := range s {
		if r < 0x20 {
			writePuppetDoubleQuote(b, s)
			return
		}
	}
	b.WriteByte('\'')
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			b.WriteByte('\\')
			b.WriteRune(r)
			escaped = false
		case r == '\'':
			b.WriteString(`\'`)
		case r == '\\':
			escaped = true
		default:
			b.WriteRune(r)
		}
	}
	if escaped {
		b.WriteByte('\\')
	}
	b.WriteByte('\'')
}

func writePuppetDoubleQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '"':
			b.WriteString(`\"`)
		case '$':
			b.WriteString(`\$`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u{%X}`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
