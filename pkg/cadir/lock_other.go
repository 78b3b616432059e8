//go:build !unix || solaris || illumos || aix

package cadir

import "os"

// On platforms without flock(2) in package syscall the directory is guarded only by the
// in-process mutex: run a single process per CA directory there.
func tryLockFile(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) error { return nil }
