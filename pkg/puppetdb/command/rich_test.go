package command

import (
	"encoding/json"
	"testing"
)

// The expected texts below are what Puppet 7.23's catalog terminus sent
// for the same values (see TestCatalogReference, which compares whole
// catalogs).
func TestStringify(t *testing.T) {
	tests := []struct {
		name, rich, want string
	}{
		{"plain data", `{"a":[1,2.5,true,null,"x"]}`, `{"a":[1,2.5,true,null,"x"]}`},
		{"default", `{"__ptype":"Default"}`, `"default"`},
		{"hash with keys that are not strings",
			`{"__ptype":"Hash","__pvalue":[[1,2],"x",{"a":1},"y",2.5,"z",true,"t",null,"u",{"__ptype":"Default"},"d",1e20,"e"]}`,
			`{"":"u","1.0e+20":"e","2.5":"z","[1, 2]":"x","default":"d","true":"t","{\"a\"=>1}":"y"}`},
		{"a key __ptype", `{"__ptype":"Hash","__pvalue":["__ptype","fake"]}`, `{"reserved key: __ptype":"fake"}`},
		{"a key __pvalue", `{"__pvalue":1}`, `{"reserved key: __pvalue":1}`},
		{"symbol", `{"__ptype":"Symbol","__pvalue":"sym"}`, `"sym"`},
		{"regexp", `{"__ptype":"Regexp","__pvalue":"a/b"}`, `"/a\\/b/"`},
		{"binary", `{"__ptype":"Binary","__pvalue":"aGVsbG8="}`, `"aGVsbG8="`},
		{"timestamp", `{"__ptype":"Timestamp","__pvalue":"2021-01-01T00:00:00.000000000 UTC"}`, `"2021-01-01T00:00:00.000000000 UTC"`},
		{"timespan", `{"__ptype":"Timespan","__pvalue":"0-01:00:00.0"}`, `"0-01:00:00.0"`},
		{"semver", `{"__ptype":"SemVer","__pvalue":"1.2.3"}`, `"1.2.3"`},
		{"uri", `{"__ptype":"URI","__pvalue":"http://example.com/x"}`, `"http://example.com/x"`},
		{"sensitive, counted", `[{"__ptype":"Sensitive","__pvalue":"a"},{"__ptype":"Sensitive","__pvalue":[1]}]`,
			`["#<Sensitive [value redacted]:1>","#<Sensitive [value redacted]:2>"]`},
		{"types", `[{"__ptype":"Pcore::IntegerType","from":1,"to":2},{"__ptype":"Pcore::IntegerType"},
			{"__ptype":"Pcore::OptionalType","type":{"__ptype":"Pcore::StringType"}},{"__ptype":"Pcore::EnumType","values":["a","b"]},
			{"__ptype":"Pcore::CallableType","param_types":null,"block_type":null,"return_type":null},
			{"__ptype":"Pcore::TypeType","type":{"__ptype":"Pcore::IntegerType"}}]`,
			`["Integer[1, 2]","Integer","Optional[String]","Enum['a', 'b']","Callable","Type[Integer]"]`},
		{"deferred", `{"__ptype":"Deferred","name":"join","arguments":[[1,2],","]}`, `"Deferred({'name' => 'join', 'arguments' => [[1, 2], ',']})"`},
		{"deferred without arguments", `{"__ptype":"Deferred","name":"f"}`, `"Deferred({'name' => 'f'})"`},
		{"deferred, quoting",
			`{"__ptype":"Deferred","name":"f","arguments":["it's","a\\b","line\nbreak","tab\tx",1.5,1e20,null,true,{"k":[1,{"__ptype":"Default"}]},"é","\"dq\"","$x"]}`,
			`"Deferred({'name' => 'f', 'arguments' => ['it\\'s', 'a\\b', \"line\\nbreak\", \"tab\\tx\", 1.5, 1.0e+20, undef, true, {'k' => [1, default]}, 'é', '\"dq\"', '$x']})"`},
		{"deferred, nested and rich arguments",
			`{"__ptype":"Deferred","name":"f","arguments":[{"__ptype":"Deferred","name":"g","arguments":[1]},{"__ptype":"Sensitive","__pvalue":"s"},{"__ptype":"Regexp","__pvalue":"x/y"},{"__ptype":"Binary","__pvalue":"aGk="},{"__ptype":"Timestamp","__pvalue":"2021-01-01T00:00:00.000000000 UTC"},{"__ptype":"Hash","__pvalue":[1,2]}]}`,
			`"Deferred({'name' => 'f', 'arguments' => [Deferred({'name' => 'g', 'arguments' => [1]}), Instance of Sensitive[String], /x\\/y/, Instance of Binary, '2021-01-01T00:00:00.000000000 UTC', {1 => 2}]})"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			if err := decode([]byte(tt.rich), &v); err != nil {
				t.Fatal(err)
			}
			got, err := encode((&stringifier{}).value(v), false)
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if w, _ := encode(want, false); string(got) != string(w) {
				t.Errorf("stringified %s\n = %s\nwant %s", tt.rich, got, w)
			}
		})
	}
}
