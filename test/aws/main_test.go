// Package aws's end-to-end tests run the fleet on the AWS drivers against
// loopback emulators: broker serve, the compile Lambda's real bootstrap, the
// AWS calls per agent run, operator access, poison jobs and redelivery
// races.
package aws

import (
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }
