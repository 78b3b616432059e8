package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBasemodulepathFlag(t *testing.T) {
	code := t.TempDir()
	envs, modules := filepath.Join(code, "environments"), filepath.Join(code, "modules")
	other := filepath.Join(t.TempDir(), "other")
	file := filepath.Join(code, "file")
	for _, d := range []string{envs, modules, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "environments") // no modules beside it

	tests := []struct {
		name    string
		flag    *string // nil: not given
		envRoot string
		want    []string
		wantErr string
	}{
		{"default beside environments", nil, envs, []string{modules}, ""},
		{"default absent", nil, bare, nil, ""},
		{"no environments, no default", nil, "", nil, ""},
		{"explicit list", ptr(other + ":" + modules), bare, []string{other, modules}, ""},
		{"explicit empty disables the default", ptr(""), envs, nil, ""},
		{"missing directory", ptr(modules + ":" + filepath.Join(code, "nope")), envs, nil, "nope does not exist"},
		{"a file", ptr(file), envs, nil, "is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f basemodulepathFlag
			if tt.flag != nil {
				if err := f.Set(*tt.flag); err != nil {
					t.Fatal(err)
				}
			}
			got, err := f.resolve(tt.envRoot)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 0 || len(tt.want) != 0 {
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("resolve = %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }
