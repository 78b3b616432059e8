package broker

import (
	"errors"
	"sort"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// destination is one resolved recipient of a message: a client held here,
// or the task that holds it.
type destination struct {
	uri  string
	here client // nil when another task holds it, or nobody
	task string // the task holding it, when it is another one
}

// route delivers m (authorized, not expired) to its targets: wildcards
// expanded over the clients held here and, with a presence store, on every
// task; a destination_report first when the sender asked for one; an
// error_message to the sender for each target that is not connected.
// from is the sending client, nil for a message the broker itself routes.
func (b *Broker) route(from client, m *message.Message) {
	dests := b.expand(m.Targets)
	if m.DestinationReport {
		uris := make([]string, 0, len(dests))
		for _, d := range dests {
			uris = append(uris, d.uri)
		}
		b.replyTo(from, serverMessage(msgDestinationReport, m.Sender, m.ID, map[string]any{"id": m.ID, "targets": uris}))
	}
	for _, d := range dests {
		b.deliverTo(from, m, d)
	}
}

// replyTo sends a message of the broker to from when it is known, else
// routes it (to a client that may be on another task).
func (b *Broker) replyTo(from client, m *message.Message) {
	if from != nil {
		b.reply(from, m)
		return
	}
	b.route(nil, m)
}

// undeliverable tells m's sender that it did not reach uri.
func (b *Broker) undeliverable(from client, m *message.Message, uri, why string) {
	b.st.undeliverable.Add(1)
	b.log.Debug("pcp: message not delivered", "uri", uri, "sender", m.Sender, "type", m.MessageType, "id", m.ID, "why", why)
	if m.Sender == ServerURI || m.Sender == "" {
		return // the broker's own messages are dropped, as pcp-broker does
	}
	b.replyTo(from, errorMessage(m.Sender, m, why))
}

// deliverTo hands m to one destination.
func (b *Broker) deliverTo(from client, m *message.Message, d destination) {
	switch {
	case d.here != nil:
		if err := d.here.deliver(m); err != nil {
			b.undeliverable(from, m, d.uri, "not delivered to "+d.uri+": "+err.Error())
			return
		}
		b.st.routed.Add(1)
	case d.task != "":
		if err := b.relay(m, d); err != nil {
			if errors.Is(err, errGone) {
				b.undeliverable(from, m, d.uri, "not connected: "+d.uri)
				return
			}
			b.st.errors.Add(1)
			b.undeliverable(from, m, d.uri, "not delivered to "+d.uri+": "+err.Error())
			return
		}
		b.st.relayed.Add(1)
	default:
		b.undeliverable(from, m, d.uri, "not connected: "+d.uri)
	}
}

// expand resolves targets to destinations: explicit URIs as they are
// (connected or not), wildcards to the matching connected clients. Each
// URI once.
func (b *Broker) expand(targets []string) []destination {
	seen := map[string]bool{}
	var out []destination
	add := func(d destination) {
		if !seen[d.uri] {
			seen[d.uri] = true
			out = append(out, d)
		}
	}
	for _, t := range targets {
		p, err := parsePattern(t)
		if err != nil {
			continue // the codec has checked the URIs
		}
		if !p.wildcard() {
			add(b.locate(t))
			continue
		}
		for _, d := range b.matching(p) {
			add(d)
		}
	}
	return out
}

// locate finds the client holding uri: here, or through presence on
// another task.
func (b *Broker) locate(uri string) destination {
	if c := b.local(uri); c != nil {
		return destination{uri: uri, here: c}
	}
	if task := b.presenceTask(uri); task != "" && task != b.o.Name {
		return destination{uri: uri, task: task}
	}
	return destination{uri: uri}
}

// matching lists the connected clients matching p, here and elsewhere, in
// URI order.
func (b *Broker) matching(p pattern) []destination {
	var out []destination
	b.mu.RLock()
	for uri, c := range b.clients {
		if p.matches(uri) {
			out = append(out, destination{uri: uri, here: c})
		}
	}
	b.mu.RUnlock()
	held := map[string]bool{}
	for _, d := range out {
		held[d.uri] = true
	}
	for _, rec := range b.presenceMatching(p) {
		if !held[rec.URI] && rec.Task != b.o.Name {
			held[rec.URI] = true
			out = append(out, destination{uri: rec.URI, task: rec.Task})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].uri < out[j].uri })
	return out
}
