package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// The PCP and PXP message types the runner sends and reads
// (puppetlabs/pcp-specifications, pxp/request_response.md and
// pcp/error_handling.md).
const (
	typeBlockingRequest     = "http://puppetlabs.com/rpc_blocking_request"
	typeBlockingResponse    = "http://puppetlabs.com/rpc_blocking_response"
	typeNonBlockingRequest  = "http://puppetlabs.com/rpc_non_blocking_request"
	typeNonBlockingResponse = "http://puppetlabs.com/rpc_non_blocking_response"
	typeProvisional         = "http://puppetlabs.com/rpc_provisional_response"
	typeRPCError            = "http://puppetlabs.com/rpc_error_message"
	typeError               = "http://puppetlabs.com/error_message"
	typeTTLExpired          = "http://puppetlabs.com/ttl_expired"
	typeDestinationReport   = "http://puppetlabs.com/destination_report"
)

// puppetModule is pxp-agent's module that runs `puppet agent --onetime`.
const puppetModule = "pxp-module-puppet"

// agentURI is the PCP URI of a node's PXP agent.
func agentURI(node string) string { return "pcp://" + node + "/agent" }

// runParams are pxp-module-puppet's run input: flags from its allow-list
// only (--noop, --environment ENV, ...; never --flag=value), env (required
// by module versions before 1.x, ignored since), and job, which the module
// passes to puppet as --job-id so the run's report names the job.
type runParams struct {
	Env   []string `json:"env"`
	Flags []string `json:"flags"`
	Job   string   `json:"job,omitempty"`
}

// nonBlockingRequest is the data of an rpc_non_blocking_request.
type nonBlockingRequest struct {
	TransactionID string    `json:"transaction_id"`
	NotifyOutcome bool      `json:"notify_outcome"`
	Module        string    `json:"module"`
	Action        string    `json:"action"`
	Params        runParams `json:"params"`
}

// statusQuery is the data of the rpc_blocking_request that asks an agent
// about an earlier transaction (module "status", action "query").
type statusQuery struct {
	TransactionID string `json:"transaction_id"`
	Module        string `json:"module"`
	Action        string `json:"action"`
	Params        struct {
		TransactionID string `json:"transaction_id"`
	} `json:"params"`
}

// runResult is pxp-module-puppet's run output (the results of its
// non-blocking response), as far as the runner keeps it.
type runResult struct {
	ExitCode        *int   `json:"exitcode"`
	Status          string `json:"status"`
	TransactionUUID string `json:"transaction_uuid"`
	Environment     string `json:"environment"`
	ErrorType       string `json:"error_type"`
	Error           string `json:"error"`
}

// statusResult is the results of a status query's blocking response:
// status is running, success, failure or unknown; stdout holds the
// module's output (a runResult) once the action ended.
type statusResult struct {
	TransactionID string `json:"transaction_id"`
	Status        string `json:"status"`
	ExitCode      *int   `json:"exitcode"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
}

// answer is the part of any message's data the runner routes by: a PXP
// message's transaction_id, or the id of the message a broker's
// error_message, ttl_expired or destination_report is about.
type answer struct {
	TransactionID string          `json:"transaction_id"`
	ID            string          `json:"id"`
	Description   string          `json:"description"`
	Results       json.RawMessage `json:"results"`
	Targets       []string        `json:"targets"`
}

// newID returns a random UUID (version 4): message ids and transaction
// ids, as pxp-agent and pcp-broker use.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newJobID returns a job id that sorts by creation time (to the second)
// and is unique: 20261126T055012Z-9f3a1c2e.
func newJobID(now time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// request builds a PCP message from the runner to node's agent.
func request(from, node, messageType string, data any, expires time.Time) (*message.Message, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("encode %s for %s: %w", messageType, node, err)
	}
	return &message.Message{
		ID:          newID(),
		MessageType: messageType,
		Sender:      from,
		Targets:     []string{agentURI(node)},
		Expires:     expires.UTC(),
		Data:        b,
	}, nil
}

// runFlags are the puppet flags of a job's runs.
func runFlags(noop bool) []string {
	if noop {
		return []string{"--noop"}
	}
	return []string{}
}

// notConnected reports whether a broker's error description says the
// target had no connection (pcp-broker: "not connected").
func notConnected(description string) bool {
	d := strings.ToLower(description)
	return strings.Contains(d, "not connected") || strings.Contains(d, "no connection") || strings.Contains(d, "not associated")
}
