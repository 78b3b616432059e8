// Package site's end-to-end tests run what a real site's control repo uses
// through broker dev and a real agent: global modules, the corpus of real
// Debian modules, eyaml, trusted facts, an external node classifier and the
// filebucket.
package site

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
