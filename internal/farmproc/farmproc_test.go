package farmproc

import (
	"bytes"
	"slices"
	"testing"
)

// The "is up" line is found however the broker's writes split it, sent
// once, and every byte reaches the log.
func TestUpWatcher(t *testing.T) {
	const upText = `time=x level=INFO msg="compilefarm dev is up" front_door=https://127.0.0.1:1 metrics=http://127.0.0.1:2/metrics admin=http://127.0.0.1:3 pcp=wss://127.0.0.1:4/pcp/` + "\n"
	log := "starting\n" + upText + "later\n" + upText
	want := []string{"127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "wss://127.0.0.1:4/pcp/"}
	for _, size := range []int{1, 7, 64, len(log)} {
		var out bytes.Buffer
		up := make(chan []string, 2)
		w := &upWatcher{log: &out, up: up}
		for b := []byte(log); len(b) > 0; {
			n := min(size, len(b))
			w.Write(b[:n])
			b = b[n:]
		}
		if out.String() != log {
			t.Errorf("writes of %d bytes: log %q, want %q", size, out.String(), log)
		}
		if len(up) != 1 {
			t.Fatalf("writes of %d bytes: %d up lines sent, want 1", size, len(up))
		}
		if got := <-up; !slices.Equal(got, want) {
			t.Errorf("writes of %d bytes: addresses %q, want %q", size, got, want)
		}
	}
}
