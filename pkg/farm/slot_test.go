package farm

import (
	"fmt"
	"testing"
	"time"
)

// TestInSlot: a key checked every slot is in its slot exactly once per
// period, whatever the key; a period of 0 or less never is.
func TestInSlot(t *testing.T) {
	start := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		period, slot time.Duration
		want         int
	}{
		{24 * time.Hour, 30 * time.Minute, 1},
		{24 * time.Hour, time.Hour, 1},
		{time.Hour, 10 * time.Minute, 1},
		{0, 30 * time.Minute, 0},
		{-time.Hour, 30 * time.Minute, 0},
	} {
		for k := 0; k < 20; k++ {
			key := fmt.Sprintf("node%02d.example.com", k)
			n := 0
			for at := start; at.Before(start.Add(tc.period)) || (tc.period <= 0 && at.Before(start.Add(24*time.Hour))); at = at.Add(tc.slot) {
				if InSlot(key, at, tc.period, tc.slot) {
					n++
				}
			}
			if n != tc.want {
				t.Errorf("period %v slot %v: %s in its slot %d times, want %d", tc.period, tc.slot, key, n, tc.want)
			}
		}
	}
}
