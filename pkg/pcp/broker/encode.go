package broker

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// v1InReplyTo is how v1 envelopes spell in-reply-to (clj-pcp-common,
// cpp-pcp-client and ruby-pcp-client's schemas); the message codec keeps it
// in Extra.
const v1InReplyTo = "in-reply-to"

// defaultExpiry is the expiry given to a message that has none (from a v2
// client) when it goes to a v1 client, which requires one.
const defaultExpiry = time.Minute

// serverTTL is the expiry of the messages the broker makes, as pcp-broker's.
const serverTTL = 3 * time.Second

// newID returns a random (version 4) UUID in lower case, the form
// ruby-pcp-client insists on.
func newID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// normalizeV1 moves a v1 envelope's "in-reply-to" to InReplyTo, so that
// the rest of the broker sees one spelling.
func normalizeV1(m *message.Message) {
	raw, ok := m.Extra[v1InReplyTo]
	if !ok {
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && m.InReplyTo == "" {
		m.InReplyTo = s
	}
	delete(m.Extra, v1InReplyTo)
	if len(m.Extra) == 0 {
		m.Extra = nil
	}
}

// encodeFor encodes m for a client of the given PCP version whose URI is
// to. v1 gets the envelope fields the v1 schemas know and nothing else
// (ruby-pcp-client refuses an envelope with unknown keys), an expiry when
// the message has none, and no debug chunks (pcp-broker no longer sends
// them). v2 gets one target, the recipient, and the data as JSON; the
// broker's error_message carries its description as the data, as
// pcp-broker's v2 does.
func (b *Broker) encodeFor(version int, to string, m *message.Message) ([]byte, error) {
	out := *m
	out.Extra = nil
	out.Debug = nil
	if version == 1 {
		if out.Expires.IsZero() {
			out.Expires = time.Now().Add(defaultExpiry).UTC()
		}
		if out.Sender == "" {
			out.Sender = ServerURI
		}
		if out.InReplyTo != "" {
			id, _ := json.Marshal(out.InReplyTo)
			out.Extra = map[string][]byte{v1InReplyTo: id}
			out.InReplyTo = ""
		}
		if out.Data == nil {
			out.Data = []byte{}
		}
		return b.codec.EncodeV1(&out)
	}
	out.Expires = time.Time{}
	out.DestinationReport = false
	if to != "" {
		out.Targets = []string{to}
	} else if len(out.Targets) > 1 {
		out.Targets = out.Targets[:1]
	}
	if out.MessageType == msgError && out.Sender == ServerURI {
		var e errorData
		if json.Unmarshal(out.Data, &e) == nil && e.Description != "" {
			out.Data, _ = json.Marshal(e.Description)
		}
	}
	if len(out.Data) == 0 {
		out.Data = nil
	} else if !json.Valid(out.Data) {
		return nil, fmt.Errorf("its data is not JSON, which PCP v2 requires")
	}
	return b.codec.EncodeV2(&out)
}

// The message types the broker reads or writes.
const (
	msgAssociateRequest  = "http://puppetlabs.com/associate_request"
	msgAssociateResponse = "http://puppetlabs.com/associate_response"
	msgInventoryRequest  = "http://puppetlabs.com/inventory_request"
	msgInventoryResponse = "http://puppetlabs.com/inventory_response"
	msgInventoryUpdate   = "http://puppetlabs.com/inventory_update"
	msgDestinationReport = "http://puppetlabs.com/destination_report"
	msgError             = "http://puppetlabs.com/error_message"
	msgTTLExpired        = "http://puppetlabs.com/ttl_expired"
)

type errorData struct {
	ID          string `json:"id,omitempty"`
	Description string `json:"description"`
}

// serverMessage makes a message from the broker to one client.
func serverMessage(typ, to, inReplyTo string, data any) *message.Message {
	raw, _ := json.Marshal(data)
	return &message.Message{
		ID:          newID(),
		MessageType: typ,
		Sender:      ServerURI,
		Targets:     []string{to},
		Expires:     time.Now().Add(serverTTL).UTC(),
		InReplyTo:   inReplyTo,
		Data:        raw,
	}
}

// errorMessage is an error_message about m (nil when the message could not
// be decoded) for to.
func errorMessage(to string, m *message.Message, description string) *message.Message {
	d := errorData{Description: description}
	reply := ""
	if m != nil {
		d.ID = m.ID
		reply = m.ID
	}
	return serverMessage(msgError, to, reply, d)
}
