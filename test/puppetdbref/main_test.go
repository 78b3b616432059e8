// Package puppetdbref checks issue 22's first promise: after the same
// agent runs, PuppetDB holds for a node served by the farm what it holds
// for a node served by Puppet Server 7 with the puppetdb termini (Debian's
// puppetserver and puppet-terminus-puppetdb), apart from what differs
// only because they are two nodes and two sets of runs (normalize says
// what and why). Both sides feed the shared test PuppetDB
// (internal/puppetdbtest); Puppet Server runs through
// internal/puppetserver, the agents through test/e2e.
package puppetdbref

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
