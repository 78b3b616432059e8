package broker

import (
	"encoding/json"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// inventoryRequest is the data of an inventory_request.
type inventoryRequest struct {
	Query     []string `json:"query"`
	Subscribe bool     `json:"subscribe"`
}

// inventoryChange is one entry of an inventory_update: a client that
// connected (1) or disconnected (-1).
type inventoryChange struct {
	Client string `json:"client"`
	Change int    `json:"change"`
}

// inventory answers an inventory_request with the connected clients
// matching its query (here and, with a presence store, on every task).
// With "subscribe": true the requester is then sent an inventory_update
// whenever a client matching the query connects to or disconnects from
// this broker, until it disconnects or asks again without "subscribe".
func (b *Broker) inventory(from client, m *message.Message) {
	var req inventoryRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Query == nil {
		b.reply(from, errorMessage(m.Sender, m, "an inventory_request's data must be {\"query\": [PCP URIs], \"subscribe\": boolean}"))
		return
	}
	var pats []pattern
	for _, q := range req.Query {
		p, err := parsePattern(q)
		if err != nil {
			b.reply(from, errorMessage(m.Sender, m, "an inventory_request's query holds "+q+", which is not a PCP URI"))
			return
		}
		pats = append(pats, p)
	}
	uris := []string{}
	seen := map[string]bool{}
	for _, p := range pats {
		var ds []destination
		if p.wildcard() {
			ds = b.matching(p)
		} else if d := b.locate(p.String()); d.here != nil || d.task != "" {
			ds = []destination{d}
		}
		for _, d := range ds {
			if !seen[d.uri] {
				seen[d.uri] = true
				uris = append(uris, d.uri)
			}
		}
	}
	// subscribe true replaces the requester's subscription; false (or
	// absent) ends it, as the v2 specification says.
	b.mu.Lock()
	if req.Subscribe {
		b.subs[from] = pats
	} else {
		delete(b.subs, from)
	}
	b.mu.Unlock()
	b.reply(from, serverMessage(msgInventoryResponse, m.Sender, m.ID, map[string]any{"uris": uris}))
}

func (p pattern) String() string { return "pcp://" + p.cn + "/" + p.typ }

// inventoryChanged tells subscribers that uri connected (1) or
// disconnected (-1).
func (b *Broker) inventoryChanged(uri string, change int) {
	var to []client
	b.mu.RLock()
	for c, pats := range b.subs {
		for _, p := range pats {
			if p.matches(uri) {
				to = append(to, c)
				break
			}
		}
	}
	b.mu.RUnlock()
	for _, c := range to {
		b.reply(c, serverMessage(msgInventoryUpdate, c.URI(), "", map[string]any{"changes": []inventoryChange{{Client: uri, Change: change}}}))
	}
}

// unsubscribe ends c's inventory subscription.
func (b *Broker) unsubscribe(c client) {
	b.mu.Lock()
	delete(b.subs, c)
	b.mu.Unlock()
}
