package memstore

import (
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestNameStore(t *testing.T) {
	farmtest.TestNameStore(t, func(t *testing.T) farm.NameStore { return New() })
}
