package broker

import (
	"errors"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// replyURI is where the broker's answers to c go: its URI, or before
// association the sender the message claimed, or one made from the
// certificate.
func (c *conn) replyURI(m *message.Message) string {
	if u := c.URI(); u != "" {
		return u
	}
	if m != nil && m.Sender != "" {
		if u, err := message.ParseURI(m.Sender); err == nil && u.CommonName == c.cn {
			return m.Sender
		}
	}
	typ := c.pathType
	if typ == "" {
		typ = "agent"
	}
	return "pcp://" + c.cn + "/" + typ
}

// answer sends a message from the broker straight to c.
func (b *Broker) answer(c *conn, m *message.Message) {
	if err := c.deliver(m); err != nil {
		b.log.Debug("pcp: could not answer a client", "node", c.cn, "uri", c.URI(), "type", m.MessageType, "err", err)
	}
}

// handleFrame decodes one frame from c and acts on it. A frame that does
// not decode gets an error_message (pcp-broker's "Could not decode
// message") and leaves the connection open.
func (b *Broker) handleFrame(c *conn, data []byte) {
	var m *message.Message
	var err error
	if c.version == 1 {
		m, err = b.codec.DecodeV1(data)
	} else {
		m, err = b.codec.DecodeV2(data)
	}
	if err != nil {
		b.st.errors.Add(1)
		b.log.Info("pcp: could not decode a message", "node", c.cn, "uri", c.URI(), "err", err)
		b.answer(c, errorMessage(c.replyURI(nil), nil, "Could not decode message: "+err.Error()))
		return
	}
	b.st.received.Add(1)
	if c.version == 1 {
		normalizeV1(m)
		m.Debug = nil
		b.handleV1(c, m)
		return
	}
	// v2: the sender is the connection's URI; a different one is refused.
	if m.Sender != "" && m.Sender != c.URI() {
		b.st.unauthorized.Add(1)
		b.answer(c, errorMessage(c.URI(), m, "Message not authenticated: the sender "+m.Sender+" is not this connection's URI "+c.URI()))
		return
	}
	m.Sender = c.URI()
	if len(m.Targets) == 0 {
		m.Targets = []string{ServerURI}
	}
	b.accept(c, m)
}

func isAssociateRequest(m *message.Message) bool {
	return m.MessageType == msgAssociateRequest && len(m.Targets) == 1 && m.Targets[0] == ServerURI
}

// handleV1 applies v1's session rules: nothing but an associate_request
// before association, the sender's common name must be the certificate's,
// one association per connection.
func (b *Broker) handleV1(c *conn, m *message.Message) {
	assoc := isAssociateRequest(m)
	uri := c.URI()
	switch {
	case assoc:
		b.associate(c, m)
	case uri == "":
		b.st.unauthorized.Add(1)
		b.log.Info("pcp: message before session association refused", "node", c.cn, "type", m.MessageType, "id", m.ID)
		b.answer(c, errorMessage(c.replyURI(m), m, "Session not associated: send an associate_request first"))
	case m.Sender != uri:
		b.st.unauthorized.Add(1)
		b.log.Info("pcp: message with another sender than the session's refused", "node", c.cn, "uri", uri, "sender", m.Sender)
		b.answer(c, errorMessage(uri, m, "Message not authenticated: the sender "+m.Sender+" is not this session's URI "+uri))
	default:
		b.accept(c, m)
	}
}

// associate answers an associate_request. A refusal is answered with
// success false and a reason, then the connection is closed (4002
// "association unsuccessful"), as pcp-broker does.
func (b *Broker) associate(c *conn, m *message.Message) {
	if !m.Expires.IsZero() && m.Expires.Before(time.Now()) {
		b.st.expired.Add(1)
		b.answer(c, serverMessage(msgTTLExpired, c.replyURI(m), m.ID, map[string]string{"id": m.ID}))
		return
	}
	reason := ""
	u, err := message.ParseURI(m.Sender)
	switch {
	case err != nil:
		reason = "Message not authenticated: the sender is not a PCP URI"
	case u.CommonName != c.cn:
		reason = "Message not authenticated: the sender " + m.Sender + " does not match the certificate's common name " + c.cn
	case reservedType(u.ClientType):
		reason = "'" + u.ClientType + "' type connections not accepted"
	case !validType(u.ClientType):
		reason = "the client type " + u.ClientType + " is not valid"
	case c.pathType != "" && u.ClientType != c.pathType:
		reason = "the client type " + u.ClientType + " is not the one this connection named in its URL (" + c.pathType + ")"
	case c.URI() != "":
		reason = "Session already associated"
	}
	to := m.Sender
	if reason != "" {
		to = c.replyURI(m)
	}
	resp := map[string]any{"id": m.ID, "success": reason == ""}
	if reason != "" {
		resp["reason"] = reason
	}
	if reason != "" {
		b.st.unauthorized.Add(1)
		b.log.Info("pcp: association refused", "node", c.cn, "uri", m.Sender, "reason", reason)
		b.answer(c, serverMessage(msgAssociateResponse, to, m.ID, resp))
		c.kick(CloseAssociationFailed, "association unsuccessful")
		return
	}
	uri := m.Sender
	c.uri.Store(&uri)
	// Registered before the answer: a client that associates again at
	// once elsewhere (a reconnection) supersedes this one, not the reverse.
	b.register(c)
	b.answer(c, serverMessage(msgAssociateResponse, uri, m.ID, resp))
	b.log.Info("pcp: client associated", "node", c.cn, "uri", uri)
}

// accept handles a message from an identified client (websocket or Local):
// messages for the broker itself, then authorization, expiry, and routing.
func (b *Broker) accept(from client, m *message.Message) {
	if len(m.Targets) == 1 && m.Targets[0] == ServerURI {
		b.serverMessage(from, m)
		return
	}
	if why := authorize(m); why != "" {
		b.st.unauthorized.Add(1)
		b.log.Info("pcp: message not authorized", "uri", m.Sender, "node", from.node(), "type", m.MessageType, "targets", m.Targets, "why", why)
		b.reply(from, errorMessage(m.Sender, m, "Message not authorized: "+why))
		return
	}
	if !m.Expires.IsZero() && m.Expires.Before(time.Now()) {
		b.st.expired.Add(1)
		b.reply(from, serverMessage(msgTTLExpired, m.Sender, m.ID, map[string]string{"id": m.ID}))
		return
	}
	b.route(from, m)
}

// reply sends a broker message to the client that caused it.
func (b *Broker) reply(to client, m *message.Message) {
	if err := to.deliver(m); err != nil && !errors.Is(err, errClosed) {
		b.log.Debug("pcp: could not answer a client", "uri", to.URI(), "type", m.MessageType, "err", err)
	}
}

// serverMessage handles a message addressed to pcp:///server.
func (b *Broker) serverMessage(from client, m *message.Message) {
	switch m.MessageType {
	case msgInventoryRequest:
		b.inventory(from, m)
	case msgAssociateRequest:
		b.reply(from, errorMessage(m.Sender, m, "Session already associated"))
	default:
		b.reply(from, errorMessage(m.Sender, m, "the broker does not handle messages of type "+m.MessageType))
	}
}
