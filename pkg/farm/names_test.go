package farm

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"md5/0123456789abcdef0123456789abcdef", true},
		{"paths/" + strings.Repeat("a", 64) + "/" + strings.Repeat("b", 64), true},
		{"A.b_c-d", true},
		{"...x", true},
		{strings.Repeat(strings.Repeat("n", MaxNameSegment)+"/", 2) + strings.Repeat("n", MaxNameLen-2*(MaxNameSegment+1)), true},
		{"", false},
		{strings.Repeat(strings.Repeat("n", MaxNameSegment)+"/", 3), false},
		{strings.Repeat("n", MaxNameSegment+1), false},
		{"/abs", false},
		{"trailing/", false},
		{"double//slash", false},
		{"a/../b", false},
		{"..", false},
		{"./a", false},
		{"space here", false},
		{"back\\slash", false},
		{"nul\x00", false},
		{"colon:x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.name)
			if tt.ok && err != nil {
				t.Fatalf("ValidateName(%q) = %v, want nil", tt.name, err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateName(%q) = %v, want ErrInvalid", tt.name, err)
			}
		})
	}
	if err := ValidateNameAddress("Bad Space", "x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad space: %v, want ErrInvalid", err)
	}
}
