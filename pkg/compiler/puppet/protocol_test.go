package puppet

import (
	"encoding/json"
	"testing"
)

func TestEncodeFacts(t *testing.T) {
	tests := []struct {
		name  string
		facts map[string]any
		want  string
	}{
		{"nil", nil, `{}`},
		{"integral float becomes integer", map[string]any{"n": float64(1024)}, `{"n":1024}`},
		{"negative integral float", map[string]any{"n": float64(-3)}, `{"n":-3}`},
		{"fraction stays float", map[string]any{"load": 0.25}, `{"load":0.25}`},
		{"beyond 2^53 stays float", map[string]any{"n": float64(1 << 60)}, `{"n":1152921504606847000}`}, // float64 lost the digits already
		{"json.Number passes through", map[string]any{"n": json.Number("1.0"), "m": json.Number("123456789012345678901")}, `{"m":123456789012345678901,"n":1.0}`},
		{"nested", map[string]any{"a": []any{float64(1), map[string]any{"b": float64(2.5), "c": "x", "d": true, "e": nil}}},
			`{"a":[1,{"b":2.5,"c":"x","d":true,"e":null}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := encodeFacts(tt.facts)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("encodeFacts = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPuppetLevel(t *testing.T) {
	for level, want := range map[string]string{
		"debug": "DEBUG", "info": "INFO", "notice": "INFO", "warning": "WARN",
		"err": "ERROR", "alert": "ERROR", "emerg": "ERROR", "crit": "ERROR",
	} {
		if got := puppetLevel(level).String(); got != want {
			t.Errorf("puppetLevel(%q) = %s, want %s", level, got, want)
		}
	}
}
