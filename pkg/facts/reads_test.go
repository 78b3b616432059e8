package facts

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestChanged(t *testing.T) {
	decode := func(s string) map[string]any {
		d, err := Decode("n1", []byte(`{"name":"n1","values":`+s+`}`))
		if err != nil {
			t.Fatal(err)
		}
		return d.Values
	}
	base := decode(`{"os":{"family":"Debian","release":{"major":"12"}},"memory":{"system":{"total":"1 GiB","available":"9"}},"n":1,"role":"web"}`)
	read := func(kind ReadKind, path ...string) Read {
		r, err := Observe(base, path, kind)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name    string
		read    Read
		now     string
		changed bool
	}{
		{"value same", read(ReadValue, "os", "family"), `{"os":{"family":"Debian","release":{"major":"13"}}}`, false},
		{"value changed", read(ReadValue, "os", "family"), `{"os":{"family":"RedHat"}}`, true},
		{"nested unread leaf", read(ReadValue, "memory", "system", "total"), `{"memory":{"system":{"total":"1 GiB","available":"1"}}}`, false},
		{"int vs float", read(ReadValue, "n"), `{"n":1.0}`, true},
		{"missing stays missing", read(ReadValue, "absent"), `{"other":1}`, false},
		{"missing appears", read(ReadValue, "absent"), `{"absent":1}`, true},
		{"present only", read(ReadPresent, "role"), `{"role":"db"}`, false},
		{"present lost", read(ReadPresent, "role"), `{}`, true},
		{"hash-ness same", read(ReadHash, "os"), `{"os":{"x":1}}`, false},
		{"hash-ness lost", read(ReadHash, "os"), `{"os":"Debian"}`, true},
		{"keys same", read(ReadKeys, "os"), `{"os":{"release":1,"family":2}}`, false},
		{"keys changed", read(ReadKeys, "os"), `{"os":{"family":2}}`, true},
		{"whole hash", read(ReadValue), `{"os":{"family":"Debian","release":{"major":"12"}},"memory":{"system":{"total":"1 GiB","available":"9"}},"n":1,"role":"web","x":1}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Records must survive a JSON round trip (they are stored).
			b, _ := json.Marshal([]Read{tt.read})
			var reads []Read
			json.Unmarshal(b, &reads)
			got, err := Changed(reads, decode(tt.now))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.changed {
				t.Errorf("Changed = %v, want %v (read %s)", got, tt.changed, b)
			}
		})
	}
}

func TestChanges(t *testing.T) {
	decode := func(s string) map[string]any {
		d, err := Decode("n1", []byte(`{"name":"n1","values":`+s+`}`))
		if err != nil {
			t.Fatal(err)
		}
		return d.Values
	}
	bigThen, bigNow := `"`+strings.Repeat("x", 600)+`"`, `"`+strings.Repeat("y", 600)+`"`
	base := decode(`{"os":{"family":"Debian","release":{"full":"12.10"}},"role":"web","n":1,"big":` + bigThen + `}`)
	read := func(kind ReadKind, path ...string) Read {
		r, err := Observe(base, path, kind)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	marker := func(v string) json.RawMessage {
		return raw(`"(602 bytes of JSON, sha256 ` + string(farm.DigestOf([]byte(v))[:12]) + `)"`)
	}
	tests := []struct {
		name  string
		reads []Read
		now   string
		limit int
		want  []Change
	}{
		{"nothing changed", []Read{read(ReadValue, "role"), read(ReadValue, "os", "release", "full")},
			`{"role":"web","os":{"release":{"full":"12.10"}}}`, 0, nil},
		{"value changed", []Read{read(ReadValue, "role"), read(ReadValue, "os", "release", "full")},
			`{"role":"web","os":{"release":{"full":"12.11"}}}`, 0,
			[]Change{{Path: []string{"os", "release", "full"}, Kind: "value", Old: raw(`"12.10"`), New: raw(`"12.11"`)}}},
		{"value lost", []Read{read(ReadValue, "role")}, `{}`, 0,
			[]Change{{Path: []string{"role"}, Kind: "value", Old: raw(`"web"`), NewMissing: true}}},
		{"value appears", []Read{read(ReadValue, "absent")}, `{"absent":[1,2]}`, 0,
			[]Change{{Path: []string{"absent"}, Kind: "value", OldMissing: true, New: raw(`[1,2]`)}}},
		{"int vs float", []Read{read(ReadValue, "n")}, `{"n":1.0}`, 0,
			[]Change{{Path: []string{"n"}, Kind: "value", Old: raw(`1`), New: raw(`1.0`)}}},
		{"present lost", []Read{read(ReadPresent, "role")}, `{}`, 0,
			[]Change{{Path: []string{"role"}, Kind: "present", Old: raw(`true`), New: raw(`false`)}}},
		{"hash-ness lost", []Read{read(ReadHash, "os")}, `{"os":"Debian"}`, 0,
			[]Change{{Path: []string{"os"}, Kind: "hash", Old: raw(`true`), New: raw(`false`)}}},
		{"keys changed", []Read{read(ReadKeys, "os")}, `{"os":{"family":1,"kernel":2}}`, 0,
			[]Change{{Path: []string{"os"}, Kind: "keys", Old: raw(`["family","release"]`), New: raw(`["family","kernel"]`)}}},
		{"keys of a hash gone", []Read{read(ReadKeys, "os")}, `{"os":1}`, 0,
			[]Change{{Path: []string{"os"}, Kind: "keys", Old: raw(`["family","release"]`), NewMissing: true}}},
		{"big values bounded", []Read{read(ReadValue, "big")}, `{"big":` + bigNow + `}`, 0,
			[]Change{{Path: []string{"big"}, Kind: "value", Old: marker(bigThen), New: marker(bigNow)}}},
		{"limit stops early", []Read{read(ReadValue, "role"), read(ReadValue, "n"), read(ReadPresent, "os")}, `{}`, 2,
			[]Change{
				{Path: []string{"role"}, Kind: "value", Old: raw(`"web"`), NewMissing: true},
				{Path: []string{"n"}, Kind: "value", Old: raw(`1`), NewMissing: true},
			}},
		{"no limit lists all", []Read{read(ReadValue, "role"), read(ReadValue, "n"), read(ReadPresent, "os")}, `{}`, 0,
			[]Change{
				{Path: []string{"role"}, Kind: "value", Old: raw(`"web"`), NewMissing: true},
				{Path: []string{"n"}, Kind: "value", Old: raw(`1`), NewMissing: true},
				{Path: []string{"os"}, Kind: "present", Old: raw(`true`), New: raw(`false`)},
			}},
		{"recorded by another encoder", []Read{{Path: []string{"os"}, Kind: ReadValue, Value: raw(`{ "release": {"full": "12.10"}, "family": "Debian" }`)}},
			`{"os":{"family":"Debian","release":{"full":"12.10"}}}`, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Records must survive a JSON round trip (they are stored).
			b, _ := json.Marshal(tt.reads)
			var reads []Read
			if err := json.Unmarshal(b, &reads); err != nil {
				t.Fatal(err)
			}
			now := decode(tt.now)
			got, err := Changes(reads, now, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("Changes =\n %s\nwant\n %s", gotJSON, wantJSON)
			}
			// The same rule as Changed, always.
			changed, err := Changed(reads, now)
			if err != nil || changed != (len(tt.want) > 0) {
				t.Errorf("Changed = %v, %v; Changes found %d", changed, err, len(got))
			}
		})
	}
	t.Run("unknown kind", func(t *testing.T) {
		if _, err := Changes([]Read{{Path: []string{"x"}, Kind: "bogus"}}, base, 0); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
	})
}

// TestCanonicalReads: observations recorded by another encoder (Ruby's
// key order, spacing) become what Observe writes for the same value, and
// Changes judges them the same before and after.
func TestCanonicalReads(t *testing.T) {
	values := map[string]any{"os": map[string]any{"family": "Debian", "release": map[string]any{"major": json.Number("12")}},
		"n": json.Number("1.0"), "tags": []any{"b", "a"}}
	tests := []struct {
		name     string
		recorded Read
		changed  bool
	}{
		{"hash in another key order", Read{Path: []string{"os"}, Kind: ReadValue,
			Value: json.RawMessage(`{"release": {"major": 12}, "family": "Debian"}`)}, false},
		{"number as written", Read{Path: []string{"n"}, Kind: ReadValue, Value: json.RawMessage(`1.0`)}, false},
		{"number written otherwise", Read{Path: []string{"n"}, Kind: ReadValue, Value: json.RawMessage(`1`)}, true},
		{"array order kept", Read{Path: []string{"tags"}, Kind: ReadValue, Value: json.RawMessage(`["a", "b"]`)}, true},
		{"keys", Read{Path: []string{"os"}, Kind: ReadKeys, Value: json.RawMessage(`[ "family", "release" ]`)}, false},
		{"missing", Read{Path: []string{"absent"}, Kind: ReadValue, Missing: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := Changed([]Read{tt.recorded}, values)
			if err != nil || before != tt.changed {
				t.Fatalf("Changed = %v, %v; want %v", before, err, tt.changed)
			}
			reads := []Read{tt.recorded}
			CanonicalReads(reads)
			if after, _ := Changed(reads, values); after != before {
				t.Errorf("Changed after CanonicalReads = %v, want %v", after, before)
			}
			if now, _ := Observe(values, tt.recorded.Path, tt.recorded.Kind); !tt.changed && string(reads[0].Value) != string(now.Value) {
				t.Errorf("canonical %s, Observe writes %s", reads[0].Value, now.Value)
			}
		})
	}
}
