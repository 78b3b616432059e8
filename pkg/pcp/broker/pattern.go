package broker

import "github.com/compilefarm/compilefarm/pkg/pcp/message"

// pattern is a PCP URI that may hold wildcards: "*" as the common name,
// the client type, or both (pcp://*/agent, pcp://node1/*).
type pattern struct{ cn, typ string }

func parsePattern(s string) (pattern, error) {
	u, err := message.ParseURI(s)
	if err != nil {
		return pattern{}, err
	}
	return pattern{cn: u.CommonName, typ: u.ClientType}, nil
}

func (p pattern) wildcard() bool { return p.cn == "*" || p.typ == "*" }

// matches reports whether the URI uri (without wildcards) matches p.
func (p pattern) matches(uri string) bool {
	u, err := message.ParseURI(uri)
	if err != nil {
		return false
	}
	return (p.cn == "*" || p.cn == u.CommonName) && (p.typ == "*" || p.typ == u.ClientType)
}
