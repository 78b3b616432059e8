// Package broker is compilefarm's PCP broker: it holds the websockets of
// PXP agents and controllers (PCP v1 binary frames on /pcp/ and
// /pcp/<type>, v2 JSON text frames on /pcp2/<type>) and routes their
// messages, across the fleet's tasks through a presence store and per-task
// inboxes when it has them.
//
// It follows puppetlabs/pcp-specifications and pcp-broker's behaviour:
// association (v1), inventory requests and subscriptions, routing to
// explicit and wildcard targets with destination reports, error_message for
// undeliverable targets and ttl_expired for expired messages, v1↔v2
// translation, pcp-broker's default message authorization (agents cannot
// send PXP requests to agents; the type "server" is the broker's own), its
// close codes (4000 superseded, 4002 association unsuccessful), an idle
// timeout, a connection limit, and the periodic closing of connections whose
// certificate was revoked. Each connection has its own reader and writer
// goroutines and a bounded write queue: a client that does not read is
// disconnected, never allowed to hold up routing.
//
// Across tasks, presence costs little per client: a client's record
// (pcp://<cn>/<type> → task) is written when it associates, cleared when it
// disconnects, and rewritten only every third of Options.ClientTTL (8 h by
// default), each client at its own time. What keeps the records honest is
// one heartbeat record per task, pcp://<task>/compilefarm-task, rewritten
// every third of Options.TaskTTL (30 s): a client record counts — for
// routing, Connected, wildcards and inventory — only while the heartbeat
// of the task it names is unexpired, so the clients of a task that died
// without clearing its records are "not connected" within TaskTTL. A
// task's liveness is cached for 5 s (a third of TaskTTL if less), so a
// burst of messages to one task's clients reads its heartbeat once. A
// task that takes a client from another live task tells it through its
// inbox, and that task closes its older connection (4000). The type
// "compilefarm-task" is reserved like "server".
package broker
