package sqsqueue

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// MessageVersion is the version of the message body this package writes
// ("v" in the JSON). Receive refuses bodies of another version.
const MessageVersion = 1

// message is the JSON body of one compile job on SQS. It is modelled on
// Puppet Server's /puppet/v4/catalog request (certname, environment, the
// facts, the code to compile, a transaction id) with the facts and the code
// passed by reference: the facts document's digest in the content store
// and the environment snapshot's code_id.
//
//	{"v":1,"certname":"web01.example.com","environment":"production",
//	 "reason":"facts-changed","facts_digest":"<sha256>","node_info":"<sha256>","code_id":"<id>",
//	 "seq":3,"lane":"urgent","slot":"candidate","enqueued_at":"2024-05-17T09:30:12.123456789Z"}
//
// slot is omitted for the node's served catalog, node_info for a job
// without node information (trusted data and classification, by digest);
// enqueued_at is RFC 3339 with nanoseconds, UTC.
type message struct {
	V           int         `json:"v"`
	Certname    string      `json:"certname"`
	Environment string      `json:"environment"`
	Reason      string      `json:"reason"`
	FactsDigest farm.Digest `json:"facts_digest"`
	NodeInfo    farm.Digest `json:"node_info,omitempty"`
	CodeID      string      `json:"code_id"`
	Seq         uint64      `json:"seq"`
	Lane        farm.Lane   `json:"lane"`
	Slot        string      `json:"slot,omitempty"`
	EnqueuedAt  time.Time   `json:"enqueued_at"`
}

// Message attribute names set on every job, for operators (console, CLI,
// subscription filters); the body stays the source of truth.
const (
	AttrCertname    = "certname"
	AttrEnvironment = "environment"
	AttrReason      = "reason"
	AttrLane        = "lane"
	AttrSeq         = "seq"
	AttrCodeID      = "code_id"
	AttrSlot        = "slot"
	AttrVersion     = "message_version"
)

func encodeJob(j farm.Job) (string, map[string]types.MessageAttributeValue, error) {
	m := message{
		V:           MessageVersion,
		Certname:    j.Certname,
		Environment: j.Environment,
		Reason:      j.Reason,
		FactsDigest: j.FactsDigest,
		NodeInfo:    j.NodeInfo,
		CodeID:      j.CodeID,
		Seq:         j.Seq,
		Lane:        j.Lane,
		Slot:        string(j.Slot),
		EnqueuedAt:  j.EnqueuedAt.UTC(),
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", nil, fmt.Errorf("encode job of %s: %v: %w", j.Certname, err, farm.ErrInvalid)
	}
	attrs := map[string]types.MessageAttributeValue{}
	str := func(name, v string) {
		if v != "" { // SQS refuses empty attribute values
			attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	num := func(name string, v uint64) {
		attrs[name] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatUint(v, 10))}
	}
	str(AttrCertname, j.Certname)
	str(AttrEnvironment, j.Environment)
	str(AttrReason, j.Reason)
	str(AttrLane, string(j.Lane))
	num(AttrSeq, j.Seq)
	str(AttrCodeID, j.CodeID)
	str(AttrSlot, string(j.Slot))
	num(AttrVersion, MessageVersion)
	return string(b), attrs, nil
}

func decodeJob(body string) (farm.Job, error) {
	var m message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return farm.Job{}, fmt.Errorf("decode job message: %v: %w", err, farm.ErrInvalid)
	}
	if m.V != MessageVersion {
		return farm.Job{}, fmt.Errorf("job message version %d, want %d: %w", m.V, MessageVersion, farm.ErrInvalid)
	}
	j := farm.Job{
		Certname:    m.Certname,
		Environment: m.Environment,
		Reason:      m.Reason,
		FactsDigest: m.FactsDigest,
		NodeInfo:    m.NodeInfo,
		CodeID:      m.CodeID,
		Seq:         m.Seq,
		Lane:        m.Lane,
		Slot:        farm.Slot(m.Slot),
		EnqueuedAt:  m.EnqueuedAt,
	}
	if err := j.Validate(); err != nil {
		return farm.Job{}, fmt.Errorf("job message: %w", err)
	}
	return j, nil
}
