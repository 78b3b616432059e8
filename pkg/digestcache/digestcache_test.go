package digestcache

import (
	"fmt"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestCacheIsBounded(t *testing.T) {
	tests := []struct {
		name string
		max  int
		want int // entries held at most
	}{
		{"explicit bound", 3, 3},
		{"default bound", 0, DefaultSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Cache[int]{Max: tt.max}
			for i := 0; i < tt.want+5; i++ {
				c.Store(farm.Digest(fmt.Sprint(i)), i)
				if c.Len() > tt.want {
					t.Fatalf("cache holds %d entries, max %d", c.Len(), tt.want)
				}
			}
			last := farm.Digest(fmt.Sprint(tt.want + 4))
			if v, ok := c.Load(last); !ok || v != tt.want+4 {
				t.Errorf("latest entry lost: %v %v", v, ok)
			}
			if _, ok := c.Load("absent"); ok {
				t.Error("an entry never stored was found")
			}
		})
	}
}
