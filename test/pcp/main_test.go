// Package pcp's end-to-end tests run Puppet on demand through the PCP broker
// with real pxp-agents and puppet agents, on broker dev and across two
// broker serve tasks.
package pcp

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
