package broker

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are the broker's statistics, updated atomically.
type counters struct {
	associated    atomic.Int64
	v1, v2        atomic.Int64
	received      atomic.Int64
	routed        atomic.Int64
	relayed       atomic.Int64
	fromInbox     atomic.Int64
	undeliverable atomic.Int64
	expired       atomic.Int64
	unauthorized  atomic.Int64
	refused       atomic.Int64
	errors        atomic.Int64
	idleClosed    atomic.Int64
	revokedClosed atomic.Int64
}

// Stats is a snapshot of the broker's state and counters since New, as
// /status/v1/services reports them.
type Stats struct {
	Connections       int64 `json:"connections"`         // open websocket connections
	Associated        int64 `json:"associated"`          // clients with a URI (websocket and in-process)
	V1                int64 `json:"v1_connections"`      // open PCP v1 connections
	V2                int64 `json:"v2_connections"`      // open PCP v2 connections
	MessagesReceived  int64 `json:"messages_received"`   // decoded messages from clients
	MessagesRouted    int64 `json:"messages_routed"`     // deliveries to clients held here
	MessagesRelayed   int64 `json:"messages_relayed"`    // messages posted to other tasks' inboxes
	MessagesFromInbox int64 `json:"messages_from_inbox"` // messages other tasks posted here
	Undeliverable     int64 `json:"undeliverable"`       // targets not connected, or not reachable
	Expired           int64 `json:"expired"`             // messages that expired before delivery
	Unauthorized      int64 `json:"unauthorized"`        // messages and associations refused
	Rejected          int64 `json:"rejected"`            // connections refused before or at the upgrade
	IdleClosed        int64 `json:"idle_closed"`         // connections closed for idleness
	RevokedClosed     int64 `json:"revoked_closed"`      // connections closed for a revoked certificate
	Errors            int64 `json:"errors"`              // undecodable frames, oversized messages, store failures
}

// Stats returns the broker's current statistics.
func (b *Broker) Stats() Stats {
	return Stats{
		Connections:       b.open.Load(),
		Associated:        b.st.associated.Load(),
		V1:                b.st.v1.Load(),
		V2:                b.st.v2.Load(),
		MessagesReceived:  b.st.received.Load(),
		MessagesRouted:    b.st.routed.Load(),
		MessagesRelayed:   b.st.relayed.Load(),
		MessagesFromInbox: b.st.fromInbox.Load(),
		Undeliverable:     b.st.undeliverable.Load(),
		Expired:           b.st.expired.Load(),
		Unauthorized:      b.st.unauthorized.Load(),
		Rejected:          b.st.refused.Load(),
		IdleClosed:        b.st.idleClosed.Load(),
		RevokedClosed:     b.st.revokedClosed.Load(),
		Errors:            b.st.errors.Load(),
	}
}

// Collectors returns the broker's Prometheus metrics (names
// compilefarm_pcp_*), to register once.
func (b *Broker) Collectors() []prometheus.Collector {
	gauge := func(name, help string, v *atomic.Int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return float64(v.Load()) })
	}
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		gauge("compilefarm_pcp_connections", "Open PCP websocket connections, by PCP version.", &b.st.v1, prometheus.Labels{"version": "1"}),
		gauge("compilefarm_pcp_connections", "Open PCP websocket connections, by PCP version.", &b.st.v2, prometheus.Labels{"version": "2"}),
		gauge("compilefarm_pcp_associated_clients", "PCP clients with a URI (websocket and in-process).", &b.st.associated, nil),
		counter("compilefarm_pcp_messages_received_total", "PCP messages received from clients.", &b.st.received),
		counter("compilefarm_pcp_messages_routed_total", "PCP messages delivered to clients held by this task.", &b.st.routed),
		counter("compilefarm_pcp_messages_relayed_total", "PCP messages posted to other tasks' inboxes.", &b.st.relayed),
		counter("compilefarm_pcp_messages_from_inbox_total", "PCP messages other tasks posted to this task's inbox.", &b.st.fromInbox),
		counter("compilefarm_pcp_messages_undeliverable_total", "PCP message targets that were not connected or not reachable.", &b.st.undeliverable),
		counter("compilefarm_pcp_messages_expired_total", "PCP messages that expired before delivery (ttl_expired).", &b.st.expired),
		counter("compilefarm_pcp_unauthorized_total", "PCP messages and associations refused (authentication, authorization).", &b.st.unauthorized),
		counter("compilefarm_pcp_connections_rejected_total", "PCP websocket connections refused at the upgrade.", &b.st.refused),
		counter("compilefarm_pcp_idle_closed_total", "PCP connections closed by the idle timeout.", &b.st.idleClosed),
		counter("compilefarm_pcp_revoked_closed_total", "PCP connections closed because their certificate was revoked.", &b.st.revokedClosed),
		counter("compilefarm_pcp_errors_total", "Undecodable PCP frames, oversized messages and presence/inbox failures.", &b.st.errors),
	}
}
