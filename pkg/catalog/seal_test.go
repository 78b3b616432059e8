package catalog

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestSeal(t *testing.T) {
	const base = `{"tags":["a"],"name":"n1","version":%s,"code_id":null,"catalog_uuid":"%s","catalog_format":2,"environment":"production","resources":[{"type":"File","title":"/x","tags":["file"],"exported":false,"parameters":{"content":"%s"}}],"edges":[],"classes":["a"]}`
	mk := func(version, uuid, content string) []byte {
		return []byte(fmt.Sprintf(base, version, uuid, content))
	}
	a, da, err := Seal(mk("1795306186", "928b8b49-44f6-4123-b006-5d4a651a0408", "hi"), "code1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		in       []byte
		codeID   string
		same     bool   // same content digest as a
		sameByte bool   // same bytes as a
		version  string // expected version in the output
	}{
		{"recompile at another time with another uuid", mk("1795309999", "11111111-4123-4123-b006-5d4a651a0408", "hi"), "code1", true, true, `"code1"`},
		{"same content, new code", mk("1795309999", "x", "hi"), "code2", true, false, `"code2"`},
		{"changed content", mk("1795306186", "x", "bye"), "code1", false, false, `"code1"`},
		{"config_version script output kept", mk(`"abc123"`, "x", "hi"), "code1", true, false, `"abc123"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, d, err := Seal(tt.in, tt.codeID)
			if err != nil {
				t.Fatal(err)
			}
			if (d == da) != tt.same {
				t.Errorf("content digest equal = %v, want %v", d == da, tt.same)
			}
			if (string(b) == string(a)) != tt.sameByte {
				t.Errorf("bytes equal = %v, want %v\n%s\n%s", string(b) == string(a), tt.sameByte, a, b)
			}
			var got struct {
				Version json.RawMessage `json:"version"`
				CodeID  string          `json:"code_id"`
				UUID    string          `json:"catalog_uuid"`
			}
			json.Unmarshal(b, &got)
			if string(got.Version) != tt.version || got.CodeID != tt.codeID || len(got.UUID) != 36 || got.UUID[14] != '8' {
				t.Errorf("sealed identity = %s %q %q", got.Version, got.CodeID, got.UUID)
			}
		})
	}
	if _, _, err := Seal([]byte("{"), "c"); err == nil {
		t.Error("Seal accepted broken JSON")
	}
}
