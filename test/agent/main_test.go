// Package agent's end-to-end tests drive a real Debian puppet agent against
// broker dev: CA bootstrap, pluginsync, catalogs, files, reports, what a
// fact change recompiles, why, exported resources, back-pressure and the
// CRL.
package agent

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
