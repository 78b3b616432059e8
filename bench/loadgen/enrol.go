package main

import (
	"context"
	"crypto/tls"

	"github.com/compilefarm/compilefarm/bench/internal/agentcert"
)

// node is one synthetic agent: its certname, TLS identity and catalog
// request.
type node struct {
	name string
	cert tls.Certificate
	body *bodyTemplate
}

// enrolAll enrols the K nodes, a few at a time (bench/internal/agentcert).
func enrolAll(ctx context.Context, f *agentcert.Farm, names []string, keyType string, parallel int) ([]*node, error) {
	agents, err := f.EnrolAll(ctx, names, agentcert.EnrolOptions{KeyType: keyType, Parallel: parallel})
	if err != nil {
		return nil, err
	}
	nodes := make([]*node, len(agents))
	for i, a := range agents {
		nodes[i] = &node{name: a.Name, cert: a.Cert}
	}
	return nodes, nil
}
