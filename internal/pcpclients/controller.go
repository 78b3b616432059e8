package pcpclients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// RequestOptions configure one run of pxp-request, a PXP controller over
// ruby-pcp-client (PCP v1) that sends one request and prints every
// message it receives.
type RequestOptions struct {
	// Server is the broker's v1 URL, such as wss://127.0.0.1:8142/pcp/.
	Server   string
	Identity Identity
	// Targets default to pcp://*/agent (with a destination report).
	Targets []string
	// Module and Action default to echo/echo; Params is the JSON of the
	// action's parameters (default {"argument":"hello"}).
	Module, Action, Params string
	// TransactionID is chosen by pxp-request when empty.
	TransactionID string
	// Blocking sends rpc_blocking_request (else rpc_non_blocking_request);
	// NotifyOutcome asks a non-blocking action for its final response.
	Blocking, NotifyOutcome bool
	// Type is the client type (default "controller"); AppendType connects
	// to Server+Type, as pxp-agent's acceptance suite does.
	Type       string
	AppendType bool
	// TTL is the request's expiry in seconds (default 10; negative for a
	// message already expired); Timeout how long
	// pxp-request waits for the final answers (default 60).
	TTL, Timeout int
}

// Received is one message pxp-request printed.
type Received struct {
	Envelope Envelope        `json:"envelope"`
	Data     json.RawMessage `json:"data"`
}

// Envelope is a v1 envelope as ruby-pcp-client decoded it.
type Envelope struct {
	ID                string   `json:"id"`
	MessageType       string   `json:"message_type"`
	Sender            string   `json:"sender"`
	Targets           []string `json:"targets"`
	Expires           string   `json:"expires"`
	InReplyTo         string   `json:"in-reply-to"`
	DestinationReport bool     `json:"destination_report"`
}

// RequestResult is what one pxp-request run printed, and how it ended.
type RequestResult struct {
	Messages []Received
	// ExitCode: 0 once every target's final answer arrived, 1 on timeout,
	// 2 when it could not connect or associate.
	ExitCode int
	Stderr   string
	// Other holds the lines of standard output that are not JSON
	// (ruby-pcp-client's own log lines, such as a refused handshake).
	Other []string
}

// OfType returns the received messages of one message type (the suffix
// after http://puppetlabs.com/ is enough, such as "rpc_blocking_response").
func (r *RequestResult) OfType(typ string) []Received {
	var out []Received
	for _, m := range r.Messages {
		if m.Envelope.MessageType == typ || strings.TrimPrefix(m.Envelope.MessageType, "http://puppetlabs.com/") == typ {
			out = append(out, m)
		}
	}
	return out
}

// Request runs pxp-request until it exits (or ctx ends, which kills it).
// An error means it could not run or printed a broken JSON line; a
// non-zero exit is in the result. pxp-request counts an answer as final
// only when its sender is a target: a broker's error_message or
// ttl_expired (sender pcp:///server) is printed, but it waits on until its
// timeout (exit 1).
func (t *Tools) Request(ctx context.Context, o RequestOptions) (*RequestResult, error) {
	args := []string{"--server", o.Server,
		"--ssl_ca_cert", o.Identity.CA, "--ssl_cert", o.Identity.Cert, "--ssl_key", o.Identity.Key}
	for _, tg := range o.Targets {
		args = append(args, "--target", tg)
	}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	add("--module", o.Module)
	add("--action", o.Action)
	add("--params", o.Params)
	add("--transaction-id", o.TransactionID)
	add("--type", o.Type)
	if o.TTL != 0 {
		add("--ttl", strconv.Itoa(o.TTL))
	}
	if o.Timeout > 0 {
		add("--timeout", strconv.Itoa(o.Timeout))
	}
	if o.Blocking {
		args = append(args, "--blocking")
	}
	if o.NotifyOutcome {
		args = append(args, "--notify-outcome")
	}
	if o.AppendType {
		args = append(args, "--append-type")
	}
	stdout, stderr, code, err := run(ctx, t.bin("pxp-request"), args)
	if err != nil {
		return nil, err
	}
	res := &RequestResult{ExitCode: code, Stderr: stderr}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if line[0] != '{' {
			res.Other = append(res.Other, string(line))
			continue
		}
		var m Received
		if err := json.Unmarshal(line, &m); err != nil {
			return res, fmt.Errorf("pcpclients: pxp-request printed a line that is not JSON: %q (stderr: %s)", line, stderr)
		}
		res.Messages = append(res.Messages, m)
	}
	return res, nil
}

// PingResult is what pcp-ping printed.
type PingResult struct {
	// Connected: it associated with the broker.
	Connected bool
	// Responders are the agents that answered the echo.
	Responders []string
	// Complete: every target of the destination report answered.
	Complete bool
	// Missing are the reported targets that did not answer in 3 seconds.
	Missing  []string
	ExitCode int
	Output   string
}

// Ping runs ruby-pcp-client's pcp-ping against server (a v1 URL): it
// associates as pcp://<certname>/ruby-pcp-client-<pid>, sends an echo to
// pcp://*/agent asking for a destination report, and waits up to 3
// seconds for the answers of every reported agent.
func (t *Tools) Ping(ctx context.Context, server string, id Identity) (*PingResult, error) {
	stdout, stderr, code, err := run(ctx, t.bin("pcp-ping"), []string{"--server", server,
		"--ssl_ca_cert", id.CA, "--ssl_cert", id.Cert, "--ssl_key", id.Key})
	if err != nil {
		return nil, err
	}
	res := parsePing(stdout)
	res.ExitCode, res.Output = code, string(stdout)+stderr
	return res, nil
}

func parsePing(stdout []byte) *PingResult {
	res := &PingResult{}
	missing := false
	for _, line := range strings.Split(string(stdout), "\n") {
		line = strings.TrimSpace(line)
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Connected to broker"):
			res.Connected = true
		case strings.HasPrefix(line, "Received all responses"):
			res.Complete = true
		case strings.Contains(line, "Following nodes were missing"):
			missing = true
		case len(f) > 0 && strings.HasPrefix(f[0], "pcp://"):
			if missing {
				res.Missing = append(res.Missing, f[0])
			} else {
				res.Responders = append(res.Responders, f[0])
			}
		}
	}
	return res
}

// run runs a program to its end and returns its output and exit code.
func run(ctx context.Context, bin string, args []string) ([]byte, string, int, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.Bytes(), errb.String(), 0, nil
	case ctx.Err() != nil:
		return out.Bytes(), errb.String(), -1, fmt.Errorf("pcpclients: %s did not finish: %w (stderr: %s)", bin, ctx.Err(), errb.String())
	case errors.As(err, &ee):
		return out.Bytes(), errb.String(), ee.ExitCode(), nil
	default:
		return nil, "", -1, fmt.Errorf("pcpclients: running %s: %w", bin, err)
	}
}
