package cadir

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// OpenCA opens the CA kept in dir, creating the directory and a new CA
// (key, certificate, empty CRL, serial counter, inventory) on first use:
// ca.Init on the directory's Store and its ca_key.pem (KeyFile). Front
// door certificates are kept in <dir>/server unless opts.ServerDir says
// otherwise. Closing the CA releases the directory.
func OpenCA(ctx context.Context, dir string, opts ca.Options) (*ca.CA, error) {
	if dir == "" {
		return nil, fmt.Errorf("open CA: no directory given: %w", farm.ErrInvalid)
	}
	st, err := Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open CA in %s: %w", dir, err)
	}
	if opts.ServerDir == "" {
		opts.ServerDir = st.path(dirServer)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Logger = opts.Logger.With("dir", dir)
	opts.OnClose = st.Close
	c, err := ca.Init(ctx, st, st.KeyFile(), opts)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("open CA in %s: %w", dir, err)
	}
	return c, nil
}

// KeyFile is the directory's ca_key.pem.
func (d *Store) KeyFile() KeyFile { return KeyFile(d.path(fileCAKey)) }
