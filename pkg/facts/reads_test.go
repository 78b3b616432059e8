package facts

import (
	"encoding/json"
	"testing"
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
