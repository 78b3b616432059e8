package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit raises this process's soft limit on open files
// (RLIMIT_NOFILE) to its hard limit, and fails when that is below need.
// Children inherit the raised limit: the broker `run` starts gets it too.
func raiseFileLimit(need uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("reading the open files limit: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, fmt.Errorf("raising the open files limit to its hard limit %d: %w", l.Max, err)
		}
	}
	if l.Cur < need {
		return l.Cur, fmt.Errorf("the open files limit is %d (hard limit %d) and this run needs about %d in each process "+
			"(a descriptor per connection, in the driver and in the broker): raise the hard limit "+
			"(as root: `ulimit -Hn %d` in the shell that runs pcpbench; /etc/security/limits.conf nofile; "+
			"docker run --ulimit nofile=%d:%d) or run fewer --conns", l.Cur, l.Max, need, need, need, need)
	}
	return l.Cur, nil
}
