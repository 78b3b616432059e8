package command

import (
	"encoding/json"
	"testing"
)

func TestRubyFloat(t *testing.T) {
	// Ruby 3.1: [1e14, 1e15, ...].map(&:to_s)
	tests := []struct {
		f    float64
		want string
	}{
		{1e14, "100000000000000.0"}, {1e15, "1.0e+15"}, {1.5e15, "1.5e+15"}, {123456789012345.0, "123456789012345.0"},
		{1234567890123456.0, "1.234567890123456e+15"}, {1e16, "1.0e+16"}, {12345678901234567.0, "1.2345678901234568e+16"},
		{100.0, "100.0"}, {0.001, "0.001"}, {1e-4, "0.0001"}, {0.00012345, "0.00012345"}, {1e-5, "1.0e-05"},
		{2.5e-300, "2.5e-300"}, {-0.0, "0.0"}, {-1.5, "-1.5"}, {0.1, "0.1"}, {1.0, "1.0"},
	}
	for _, tt := range tests {
		if got := rubyFloat(tt.f); got != tt.want {
			t.Errorf("rubyFloat(%v) = %s, want %s", tt.f, got, tt.want)
		}
	}
}

func TestRubyInspect(t *testing.T) {
	// Ruby 3.1's String#inspect, Array#inspect and Hash#inspect.
	tests := []struct {
		json, want string
	}{
		{`"\u0001"`, `"\u0001"`}, {`"\u007f"`, `"\u007F"`}, {"\"\u00a0\"", "\"\u00a0\""}, {`"\u2028"`, `"\u2028"`},
		{`"\ud7ff"`, `"\uD7FF"`}, {"\"\u0085\"", "\"\u0085\""}, {`"a\"b\\c"`, `"a\"b\\c"`},
		{`"#{x} #$x #@x #x"`, `"\#{x} \#$x \#@x #x"`}, {`"\u001b\u0007\b\f\u000b\n\r\t"`, `"\e\a\b\f\v\n\r\t"`},
		{`"é😀"`, `"é😀"`}, {`[1,null,true,{"b":2.0},"s",1e20,12345678901234567890]`, `[1, nil, true, {"b"=>2.0}, "s", 1.0e+20, 12345678901234567890]`},
		{`{"z":1,"a":[]}`, `{"a"=>[], "z"=>1}`},
	}
	for _, tt := range tests {
		var v any
		if err := decode([]byte(tt.json), &v); err != nil {
			t.Fatal(err)
		}
		if got := rubyInspect(v); got != tt.want {
			t.Errorf("inspect %s = %s, want %s", tt.json, got, tt.want)
		}
	}
}

func TestInspectRaw(t *testing.T) {
	// to_s of what ToStringifiedConverter reads; hashes keep their order.
	tests := []struct{ json, want string }{
		{`"text"`, "text"}, {`null`, ""}, {`12`, "12"}, {`1.50`, "1.5"}, {`false`, "false"},
		{`{"z":1,"a":{"__ptype":"x"}}`, `{"z"=>1, "a"=>{"reserved key: __ptype"=>"x"}}`},
		{`["a",["b"]]`, `["a", ["b"]]`},
	}
	for _, tt := range tests {
		got, err := inspectRaw(json.RawMessage(tt.json))
		if err != nil || got != tt.want {
			t.Errorf("inspectRaw(%s) = %q, %v; want %q", tt.json, got, err, tt.want)
		}
	}
	if _, err := inspectRaw([]byte(`{"a":`)); err == nil {
		t.Error("inspectRaw of malformed JSON: no error")
	}
}

func TestWireTimeOf(t *testing.T) {
	tests := []struct{ in, want string }{
		{"2026-11-21T22:28:30.337368966+00:00", "2026-11-21T22:28:30.337+00:00"},
		{"2026-11-21T22:28:30.337999999Z", "2026-11-21T22:28:30.337Z"},
		{"2026-11-21T17:28:30-05:00", "2026-11-21T17:28:30.000-05:00"},
	}
	for _, tt := range tests {
		got, _, err := wireTimeOf(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("wireTimeOf(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, _, err := wireTimeOf("2026-11-21 22:28:30"); err == nil {
		t.Error("wireTimeOf accepted a time without a zone")
	}
}

func TestCommandParam(t *testing.T) {
	for c, want := range map[Command]string{ReplaceFacts: "replace_facts", ReplaceCatalog: "replace_catalog", StoreReport: "store_report"} {
		if c.Param() != want {
			t.Errorf("%v.Param() = %s, want %s", c, c.Param(), want)
		}
	}
	if ReplaceFacts.Version != 5 || ReplaceCatalog.Version != 9 || StoreReport.Version != 8 {
		t.Error("command versions are not the terminus's")
	}
}
