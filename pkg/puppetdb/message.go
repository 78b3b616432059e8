// Package puppetdb feeds a site's PuppetDB as Puppet Server's PuppetDB
// termini do: the Sink puts a command in the farm's outbox when a node's
// facts change, when it applies a new catalog and for every report, without
// ever blocking or failing the agent's run; the Drainer delivers them, in
// order per node, retried while PuppetDB is away and set aside when it
// refuses one; the Client speaks PuppetDB's command and query APIs over
// mutual TLS (or plain HTTP on loopback).
package puppetdb

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Kind is what a Message asks PuppetDB to do.
type Kind string

// The kinds of Message, named as PuppetDB names its commands.
const (
	KindFacts   Kind = "replace facts"   // the node's stored facts
	KindCatalog Kind = "replace catalog" // the catalog the node applied (the farm's served catalog)
	KindReport  Kind = "store report"    // an agent's report
)

// Message is the outbox's record of one command: what the command is made
// of when it is delivered, not the command itself, so that sending costs
// the agent's run as little as possible (references into the stores, and
// a report's bytes compressed).
type Message struct {
	Kind        Kind   `json:"kind"`
	Node        string `json:"node"`
	Environment string `json:"environment,omitempty"`
	// At is when the farm received what the command carries: its
	// producer_timestamp.
	At time.Time `json:"at"`
	// Facts and NodeInfo (KindFacts) point at the facts document and the
	// node information in the content store.
	Facts    farm.Digest `json:"facts,omitempty"`
	NodeInfo farm.Digest `json:"node_info,omitempty"`
	// CatalogUUID (KindCatalog) names the catalog the node's report says
	// it applied; the drainer finds it on the node (current or history).
	CatalogUUID string `json:"catalog_uuid,omitempty"`
	// TransactionUUID (KindCatalog) is the run's, from its report: PuppetDB
	// ties the catalog to the run's report by it, as Puppet Server's
	// catalog command carries the run's.
	TransactionUUID string `json:"transaction_uuid,omitempty"`
	// ReportGzip (KindReport) is the agent's report, gzipped; Report
	// points at it in the content store (SpaceReports) instead when it is
	// too large for an outbox message.
	ReportGzip []byte      `json:"report_gz,omitempty"`
	Report     farm.Digest `json:"report,omitempty"`
}

// maxInlineReport is the largest gzipped report a message carries itself:
// base64 makes it a third larger, and the message must stay within
// farm.MaxOutboxBody.
const maxInlineReport = farm.MaxOutboxBody*3/4 - 4<<10

// Validate checks a message as the drainer needs it; the error wraps
// farm.ErrInvalid.
func (m Message) Validate() error {
	if err := farm.ValidateCertname(m.Node); err != nil {
		return fmt.Errorf("puppetdb %s message: %w", m.Kind, err)
	}
	ok := false
	switch m.Kind {
	case KindFacts:
		ok = m.Facts.Valid() && (m.NodeInfo == "" || m.NodeInfo.Valid())
	case KindCatalog:
		ok = m.CatalogUUID != ""
	case KindReport:
		ok = (len(m.ReportGzip) > 0) != (m.Report != "") && (m.Report == "" || m.Report.Valid())
	default:
		return fmt.Errorf("puppetdb message for %s: unknown kind %q: %w", m.Node, m.Kind, farm.ErrInvalid)
	}
	if !ok || m.At.IsZero() {
		return fmt.Errorf("puppetdb %s message for %s lacks what the command is made of: %w", m.Kind, m.Node, farm.ErrInvalid)
	}
	return nil
}

// Encode returns m as an outbox message of its node's group.
func (m Message) Encode() (farm.OutboxMessage, error) {
	if err := m.Validate(); err != nil {
		return farm.OutboxMessage{}, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return farm.OutboxMessage{}, fmt.Errorf("encode puppetdb %s message for %s: %w", m.Kind, m.Node, err)
	}
	return farm.OutboxMessage{Group: m.Node, Body: b}, nil
}

// Decode reads a message from an outbox message's body; the error wraps
// farm.ErrInvalid.
func Decode(body []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return Message{}, fmt.Errorf("decode puppetdb message: %v: %w", err, farm.ErrInvalid)
	}
	return m, m.Validate()
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func gunzipBytes(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
