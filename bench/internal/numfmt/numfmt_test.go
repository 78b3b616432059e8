package numfmt

import (
	"math"
	"testing"
)

func TestInt(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 100000: "100,000",
		1234567: "1,234,567", -1500: "-1,500", -1234567: "-1,234,567"} {
		if got := Int(in); got != want {
			t.Errorf("Int(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestFloat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		prec int
		want string
	}{
		{1234.5, 1, "1,234.5"}, {0.25, 2, "0.25"}, {-2.5, 1, "-2.5"}, {-0.001, 1, "0.0"},
		{math.NaN(), 1, "–"}, {math.Inf(1), 0, "–"},
	} {
		if got := Float(tc.v, tc.prec); got != tc.want {
			t.Errorf("Float(%v, %d) = %q, want %q", tc.v, tc.prec, got, tc.want)
		}
	}
}
