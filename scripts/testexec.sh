#!/usr/bin/env bash
# go test -exec wrapper for scripts/test.sh: runs one package's test binary
# (go runs it in the package's directory) and appends the package's
# directory and the CPU seconds the binary and every child it waited for
# used (brokers, Ruby workers, puppet agents, emulators) to $TEST_CPU_LOG.
"$@"
rc=$?
if [ -n "${TEST_CPU_LOG:-}" ]; then
	# times: this shell's user and system time, then its children's. It
	# must run in this shell (not a pipeline's subshell) to see them.
	t=$(mktemp)
	times >"$t"
	awk -v dir="$PWD" 'NR == 2 {
		s = 0
		for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
		printf "%s\t%.1f\n", dir, s }' "$t" >>"$TEST_CPU_LOG"
	rm -f "$t"
fi
exit $rc
