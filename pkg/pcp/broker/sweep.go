package broker

import (
	"context"
	"time"
)

// sweep closes idle connections and those whose certificate was revoked,
// and refreshes the presence records that are due, until ctx ends.
func (b *Broker) sweep(ctx context.Context) {
	idleEvery := min(max(b.o.IdleTimeout/10, 10*time.Millisecond), 30*time.Second)
	idle := time.NewTicker(idleEvery)
	defer idle.Stop()
	revoked := time.NewTicker(b.o.RevocationCheck)
	defer revoked.Stop()
	presence := time.NewTicker(b.refreshCheck())
	defer presence.Stop()
	// A refresh runs beside the sweeps; the next waits for it to end.
	refreshing := make(chan struct{}, 1)
	defer func() { refreshing <- struct{}{} }() // wait for the last one
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			b.closeIdle(time.Now())
		case <-revoked.C:
			b.closeRevoked()
		case <-presence.C:
			select {
			case refreshing <- struct{}{}:
				go func() {
					defer func() { <-refreshing }()
					b.refreshDue(ctx, time.Now())
				}()
			default: // the previous refresh is still going
			}
		}
	}
}

// openConns returns the open websocket connections.
func (b *Broker) openConns() []*conn {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		out = append(out, c)
	}
	return out
}

// closeIdle closes the connections that sent nothing (message, ping or
// pong) for IdleTimeout.
func (b *Broker) closeIdle(now time.Time) {
	for _, c := range b.openConns() {
		if now.Sub(c.idleSince()) > b.o.IdleTimeout {
			b.st.idleClosed.Add(1)
			b.log.Info("pcp: closing an idle connection", "node", c.cn, "uri", c.URI(), "idle", b.o.IdleTimeout)
			c.kick(CloseGoingAway, "idle timeout")
		}
	}
}

// closeRevoked closes the connections whose certificate is now revoked.
func (b *Broker) closeRevoked() {
	if b.o.Revocations == nil {
		return
	}
	for _, c := range b.openConns() {
		if c.serial != nil && b.o.Revocations.IsRevoked(c.serial) {
			b.st.revokedClosed.Add(1)
			b.log.Warn("pcp: closing the connection of a revoked certificate", "node", c.cn, "uri", c.URI())
			c.kick(ClosePolicy, "certificate revoked")
		}
	}
}
