package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/backoff"
)

func TestSleep(t *testing.T) {
	background := func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		d       time.Duration
		want    error
		atLeast time.Duration // how long it must have waited
	}{
		{"waits d", background, 20 * time.Millisecond, nil, 20 * time.Millisecond},
		{"zero", background, 0, nil, 0},
		{"ended context", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, time.Hour, context.Canceled, 0},
		{"context ends first", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Millisecond)
		}, time.Hour, context.DeadlineExceeded, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			err := backoff.Sleep(ctx, tt.d)
			took := time.Since(start)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Sleep = %v, want %v", err, tt.want)
			}
			if took < tt.atLeast || took > 5*time.Second {
				t.Errorf("Sleep took %s, want between %s and 5s", took, tt.atLeast)
			}
		})
	}
}
