package cadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// readRecord reads a record file; ErrNotFound when absent.
func readRecord(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, farm.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
