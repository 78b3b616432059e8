// Package deploy's end-to-end tests cover code deploys, staged releases, bad
// input and a broker killed with compiles queued, on broker dev.
package deploy

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
