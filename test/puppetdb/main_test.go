// Package puppetdb's end-to-end tests feed a real PuppetDB (Debian's
// PuppetDB 7 on PostgreSQL 15, shared by the suite: scripts/puppetdb.sh)
// from real agents' runs through broker dev, and read it back as
// PuppetDB's clients do (its query API, pypuppetdb).
package puppetdb

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
