package broker

import (
	"strings"

	"github.com/compilefarm/compilefarm/pkg/pcp/message"
)

// authorize applies pcp-broker's default message authorization and
// returns why m is refused, or "". Agents may not send PXP requests
// (rpc_blocking_request, rpc_non_blocking_request, ...) to other agents:
// only controllers start actions on agents. Nobody sends as the broker.
func authorize(m *message.Message) string {
	s, err := message.ParseURI(m.Sender)
	if err != nil {
		return "the sender is not a PCP URI"
	}
	if s.ClientType == "server" {
		return "clients cannot send as the type 'server'"
	}
	if s.ClientType != "agent" || !isPXPRequest(m.MessageType) {
		return ""
	}
	for _, t := range m.Targets {
		u, err := message.ParseURI(t)
		if err == nil && (u.ClientType == "agent" || u.ClientType == "*") {
			return "agents cannot send PXP requests to agents"
		}
	}
	return ""
}

// isPXPRequest reports whether typ is a PXP request (rpc_*_request).
func isPXPRequest(typ string) bool {
	rest, ok := strings.CutPrefix(typ, "http://puppetlabs.com/rpc_")
	return ok && strings.HasSuffix(rest, "_request")
}
