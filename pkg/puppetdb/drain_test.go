package puppetdb

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// renamed builds a message's command under another name (one PuppetDB
// does not know, which it refuses at once) or, for the name "large", with
// a payload over the test PuppetDB's max-command-size (16 MiB,
// scripts/puppetdb.sh), which it refuses too.
type renamed struct {
	Builder
	names map[farm.Digest]string // facts digest → command name
}

func (r renamed) Build(ctx context.Context, m Message) (Command, error) {
	c, err := r.Builder.Build(ctx, m)
	switch n, ok := r.names[m.Facts]; {
	case !ok:
	case n == "large":
		c.Payload = []byte(`{"certname":"` + m.Node + `","values":{"junk":"` + strings.Repeat("x", 17<<20) + `"}}`)
	default:
		c.Name = n
	}
	return c, err
}

// TestDrainer: commands wait in the outbox while PuppetDB cannot be
// reached, each node's in order, and are delivered when it can; a command
// PuppetDB refuses is set aside and the node's next one goes on.
func TestDrainer(t *testing.T) {
	p := puppetdbtest.Shared(t)
	ctx := context.Background()
	store := memstore.New()
	o := memstore.NewOutbox(memstore.OutboxOptions{})
	name := puppetdbtest.Certname(t, "drainer")
	sink := &Sink{Outbox: o, Spill: store}
	var digests []farm.Digest
	for i := 1; i <= 4; i++ {
		doc, _ := json.Marshal(map[string]any{"name": name, "values": map[string]any{"cf_seq": i}})
		d, err := store.Put(ctx, farm.SpaceFacts, doc)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		sink.Facts(ctx, name, "production", d, "", true)
	}
	drainer := func(url string, names map[farm.Digest]string) *Drainer {
		urls, err := ParseURLs(url)
		if err != nil {
			t.Fatal(err)
		}
		return &Drainer{Outbox: o, Client: NewClient(urls, nil, "compilefarm.test"), Wait: time.Millisecond,
			Commands: renamed{&Commands{Content: store, Nodes: store, Producer: "compilefarm.test"}, names}}
	}

	down := drainer("http://"+closedPort(t), nil)
	var last time.Duration
	for i := 1; i <= 2; i++ {
		pause, err := down.DrainOnce(ctx)
		if err != nil || pause <= last {
			t.Fatalf("attempt %d with PuppetDB away: pause %v, %v; want more than %v (a growing back-off)", i, pause, err, last)
		}
		last = pause
		// The drainer waits its pause before the next attempt; the test
		// does not, and makes the retried command visible again at once.
		waitVisible(t, o)
	}
	if st, _ := o.Stats(ctx); st.Backlog != 4 || st.DeadLetters != 0 {
		t.Fatalf("while PuppetDB is away: %+v, want all 4 waiting", st)
	}

	// Back, and refusing the second command (an unknown name) and the
	// third (too large): the first and fourth are delivered, in order; the
	// others are set aside.
	up := drainer(p.URL, map[farm.Digest]string{digests[1]: "no such command", digests[2]: "large"})
	for st, _ := o.Stats(ctx); st.Backlog > 0; st, _ = o.Stats(ctx) {
		if _, err := up.DrainOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := o.DeadLetters(ctx, 10)
	if err != nil || len(dead) != 2 || dead[0].Group != name || !strings.Contains(dead[0].Reason, "HTTP 400") || !strings.Contains(dead[1].Reason, "HTTP 413") {
		t.Fatalf("dead letters %+v (%v), want the unknown command (400) and the large one (413)", dead, err)
	}
	p.Eventually(t, "facts", fmt.Sprintf(`["and",["=","certname",%q],["=","name","cf_seq"]]`, name), func(rows []map[string]any) bool {
		return len(rows) == 1 && rows[0]["value"] == float64(4)
	})
}

// waitVisible waits until a retried message can be received again (its
// back-off passed).
func waitVisible(t *testing.T, o farm.Outbox) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := o.Receive(context.Background(), 1, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			o.Retry(context.Background(), ds[0].ID, 0)
			return
		}
	}
	t.Fatal("retried message never came back")
}
