package broker

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Presence refresh: a held client's record is rewritten every third of
// ClientTTL from a first time drawn between a sixth and a third of it after
// the client registered, so that clients that connected together (a
// restart of the fleet) are not refreshed together; the sweep looks every
// refreshCheck for records due and refreshes at most refreshBatch of them,
// refreshConcurrency at once.
const (
	refreshBatch       = 500
	refreshConcurrency = 32
)

// refreshCheck is how often the sweep looks for presence records due.
func (b *Broker) refreshCheck() time.Duration {
	return min(max(b.o.ClientTTL/30, 10*time.Millisecond), time.Minute)
}

// firstRefresh is when a client registered at now is first refreshed.
func (b *Broker) firstRefresh(now time.Time) time.Time {
	period := b.o.ClientTTL / 3
	if period < 2 {
		return now.Add(period)
	}
	return now.Add(period/2 + rand.N(period/2))
}

// presenceTask returns the task whose record holds uri when it is another,
// live one, else "".
func (b *Broker) presenceTask(uri string) string {
	if b.o.Presence == nil || isTaskURI(uri) {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	p, err := b.o.Presence.LookupPresence(ctx, uri)
	if err != nil {
		if !errors.Is(err, farm.ErrNotFound) {
			b.st.errors.Add(1)
			b.log.Warn("pcp: presence lookup failed", "uri", uri, "err", err)
		}
		return ""
	}
	if p.Task == b.o.Name || !b.taskAlive(ctx, p.Task) {
		return ""
	}
	return p.Task
}

// maxPresencePages bounds a wildcard's walk of the presence store.
const maxPresencePages = 1000

// presenceMatching returns the unexpired presence records of other, live
// tasks matching p, when p names a client type (the store's index is by
// type). Heartbeat records are not clients.
func (b *Broker) presenceMatching(p pattern) []farm.Presence {
	if b.o.Presence == nil || p.typ == "*" || p.typ == TaskClientType {
		return nil
	}
	q := farm.PresenceQuery{ClientType: p.typ}
	if p.cn != "*" {
		q.CommonName = p.cn
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	var out []farm.Presence
	for range maxPresencePages {
		page, err := b.o.Presence.QueryPresence(ctx, q)
		if err != nil {
			b.st.errors.Add(1)
			b.log.Warn("pcp: presence query failed", "type", p.typ, "err", err)
			break
		}
		for _, rec := range page.Records {
			if rec.Task != b.o.Name && b.taskAlive(ctx, rec.Task) {
				out = append(out, rec)
			}
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	return out
}

// setPresence records that this task holds uri.
func (b *Broker) setPresence(uri string) {
	if b.o.Presence == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	p := farm.Presence{URI: uri, Task: b.o.Name, Expires: time.Now().Add(b.o.ClientTTL)}
	if err := b.o.Presence.SetPresence(ctx, p); err != nil {
		b.st.errors.Add(1)
		b.log.Warn("pcp: recording presence failed; other tasks cannot reach the client until its next refresh or reconnection", "uri", uri, "task", b.o.Name, "err", err)
	}
}

// claimPresence records that this task holds uri, which a client just
// took. When the record it replaces names another live task, that task
// is told (through its inbox) to close its older connection at once
// rather than at that record's next refresh.
func (b *Broker) claimPresence(uri string) {
	if b.o.Presence == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	old, err := b.o.Presence.LookupPresence(ctx, uri)
	b.setPresence(uri)
	if err != nil || old.Task == b.o.Name || !b.taskAlive(ctx, old.Task) {
		return
	}
	body, err := json.Marshal(relayed{Target: uri, From: b.o.Name, Superseded: true})
	if err == nil {
		err = b.o.Inbox.Post(ctx, old.Task, body)
	}
	if err != nil && !errors.Is(err, farm.ErrNotFound) {
		b.log.Info("pcp: could not tell the task that held the client before; it closes that connection at its next refresh", "uri", uri, "task", old.Task, "err", err)
	}
}

// supersededElsewhere closes the client holding uri here when its record
// now names another live task, as that task said (claimPresence).
func (b *Broker) supersededElsewhere(uri, task string) {
	c := b.local(uri)
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	p, err := b.o.Presence.LookupPresence(ctx, uri)
	if err != nil || p.Task == b.o.Name || !b.taskAlive(ctx, p.Task) || b.local(uri) != c {
		return // reconnected here since, or gone
	}
	b.log.Info("pcp: the client associated with another task; closing this older connection", "uri", uri, "node", c.node(), "task", p.Task, "told_by", task)
	c.kick(CloseSuperseded, "superseded")
}

// clearPresence removes this task's record of uri.
func (b *Broker) clearPresence(uri string) {
	if b.o.Presence == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := b.o.Presence.ClearPresence(ctx, uri, b.o.Name); err != nil {
		b.st.errors.Add(1)
		b.log.Warn("pcp: clearing presence failed; the record is ignored once this task stops, and expires by itself", "uri", uri, "task", b.o.Name, "err", err)
	}
}

// refreshDue refreshes the records of at most refreshBatch held clients
// whose refresh is due at now (the others wait for the next check), and
// schedules their next refresh a third of ClientTTL later.
func (b *Broker) refreshDue(ctx context.Context, now time.Time) {
	if b.o.Presence == nil {
		return
	}
	period := b.o.ClientTTL / 3
	batch := map[string]client{}
	b.mu.Lock()
	for uri, at := range b.due {
		if len(batch) == refreshBatch {
			break
		}
		if at.After(now) {
			continue
		}
		c := b.clients[uri]
		if c == nil {
			delete(b.due, uri)
			continue
		}
		batch[uri] = c
		next := at.Add(period) // each client keeps its own phase
		if !next.After(now) {
			next = now.Add(period)
		}
		b.due[uri] = next
	}
	b.mu.Unlock()
	sem := make(chan struct{}, refreshConcurrency)
	var wg sync.WaitGroup
	for uri, c := range batch {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			b.refreshClient(ctx, uri, c)
		}()
	}
	wg.Wait()
}

// refreshClient renews the record of uri, held here by c. A record that
// now names another live task means the client associated there since (a
// reconnection through the load balancer): c is superseded and closed
// (4000), and the newer record is left alone. A record of a dead task is
// taken back.
func (b *Broker) refreshClient(ctx context.Context, uri string, c client) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	p, err := b.o.Presence.LookupPresence(ctx, uri)
	switch {
	case err == nil && p.Task != b.o.Name && b.taskAlive(ctx, p.Task):
		b.log.Info("pcp: the client associated with another task; closing this older connection", "uri", uri, "node", c.node(), "task", p.Task)
		c.kick(CloseSuperseded, "superseded")
		return
	case err != nil && !errors.Is(err, farm.ErrNotFound):
		// Writing blind could take back a newer record of another task;
		// the record lasts until the refresh after next.
		b.st.errors.Add(1)
		b.log.Warn("pcp: presence lookup failed; the client's record is refreshed next time", "uri", uri, "node", c.node(), "err", err)
		return
	}
	if b.local(uri) == c {
		b.setPresence(uri)
	}
}
