#!/usr/bin/env bash
# `make test`'s runner, once the installs, gofmt and go vet have passed:
#
#  1. go test -count=1 over every package, with the end-to-end packages
#     (test/...), the longest, first so that they start at once and run
#     side by side with the rest (TEST_P test binaries at a time, default 6:
#     each end-to-end package leaves the CPU idle while it waits on its
#     brokers, agents and emulators, so together they keep both cores
#     busy). bench/ runs with -short:
#     the measurement commands' own end-to-end runs (a herd against a real
#     broker, a PCP run, scalebench on the emulators) are part of
#     `make bench`, which runs them before it measures;
#  2. make fuzz.
#
# The CDK app's tests and a synth (make infra-test, make synth: node and
# jsii, about one core) run in the background beside step 1, whose tail
# leaves a core idle (their output in TEST_LOG.infra); the run waits for
# them after step 1 and fails with their output when they failed.
#
# A real PuppetDB (scripts/puppetdb.sh) starts in the background before
# step 1, in a temporary directory (COMPILEFARM_PUPPETDB_DIR; its output in
# TEST_LOG.puppetdb): the tests that need it (internal/puppetdbtest.Shared)
# wait for it while the others build and run. It is stopped at the end,
# whatever happens, and a failed start fails the run.
#
# It stops at the first phase that fails, and always ends with the ten
# slowest packages of step 1 and the time of each phase, so that a slow
# newcomer shows at once. TEST_LOG (default .tools/test.log) keeps step 1's
# output, and TEST_LOG.cpu each package's CPU seconds; TEST_TIMEOUT
# (default 20m) is go test's -timeout.
set -uo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
P=${TEST_P:-6}
TIMEOUT=${TEST_TIMEOUT:-20m}
LOG=${TEST_LOG:-.tools/test.log}
case $LOG in /*) ;; *) LOG=$PWD/$LOG ;; esac
CPU_LOG=$LOG.cpu
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
: >"$CPU_LOG"
export TEST_CPU_LOG=$CPU_LOG
phases=()

# table prints the ten slowest packages of step 1 (wall time, and the CPU
# time of the test binary and its children: scripts/testexec.sh) and the
# phases' times.
table() {
	echo
	echo "make test: the ten slowest packages (go test; CPU: the test binary and what it started)"
	awk -F'\t' -v root="$PWD/" -v mod="$($GO list -m)/" '
		FILENAME == ARGV[1] { d = $1; sub(root, "", d); cpu[mod d] = $2; next }
		($1 ~ /^(ok|FAIL) *$/) && $3 ~ /^[0-9.]+s$/ {
			sub(/s$/, "", $3); printf "%8.1f s wall %8s s CPU  %-4s %s\n", $3, (($2 in cpu) ? cpu[$2] : "?"), $1, $2 }' "$CPU_LOG" "$LOG" |
		sort -rn | head -10
	awk -F'\t' '{ s += $2 } END { printf "all test binaries: %.0f s of CPU\n", s }' "$CPU_LOG"
	echo "make test: phases"
	for p in "${phases[@]}"; do echo "  $p"; done
}

# The shared PuppetDB: started now, in the background (20-90 s, mostly the
# JVM), while go test builds the test binaries.
PDB_LOG=$LOG.puppetdb
PDB_DIR=$(mktemp -d "${TMPDIR:-/tmp}/compilefarm-puppetdb.XXXXXX") || exit 1
export COMPILEFARM_PUPPETDB_DIR=$PDB_DIR
GO=$GO scripts/puppetdb.sh start "$PDB_DIR" >"$PDB_LOG" 2>&1 &
PDB_PID=$!

# puppetdb_started waits for the start and fails, with its output, when it
# failed; otherwise it says how long the start took.
puppetdb_started() {
	local rc=0
	[ -z "$PDB_PID" ] && return 0
	wait "$PDB_PID" || rc=$?
	PDB_PID=
	if [ $rc -ne 0 ]; then
		echo "make test: scripts/puppetdb.sh start $PDB_DIR failed (exit $rc); its output ($PDB_LOG):" >&2
		tail -n 40 "$PDB_LOG" >&2
		return $rc
	fi
	tail -n 1 "$PDB_LOG"
}

# stop_puppetdb stops the PuppetDB (a start still running first) and
# removes its directory.
stop_puppetdb() {
	[ -d "$PDB_DIR" ] || return 0
	if [ -n "$PDB_PID" ]; then
		kill "$PDB_PID" 2>/dev/null
		wait "$PDB_PID" 2>/dev/null
		PDB_PID=
	fi
	scripts/puppetdb.sh stop "$PDB_DIR" >>"$PDB_LOG" 2>&1 ||
		echo "make test: scripts/puppetdb.sh stop $PDB_DIR failed; see $PDB_LOG" >&2
	rm -rf "$PDB_DIR"
}
# stop_infra ends the CDK app's background run when the run ends early.
stop_infra() {
	[ -n "${INFRA_PID:-}" ] || return 0
	kill -- -"$INFRA_PID" 2>/dev/null
	wait "$INFRA_PID" 2>/dev/null
	INFRA_PID=
}
trap 'stop_infra; stop_puppetdb; table' EXIT

# phase runs a phase and records its time; a failing phase ends the run.
phase() {
	local name=$1 start rc
	shift
	start=$(date +%s)
	"$@"
	rc=$?
	phases+=("$(printf '%6d s  %s%s' $(($(date +%s) - start)) "$name" "$([ $rc -eq 0 ] || echo "  FAILED (exit $rc)")")")
	if [ $rc -ne 0 ]; then
		echo "make test: $name failed (exit $rc); its output is above (go test's is also in $LOG)" >&2
		exit $rc
	fi
}

gotest() {
	local pkgs
	pkgs=$($GO list ./... | grep -v -e '/bench/' -e '/bench$') || return 1
	# test/... and the puppet engine's package (the most CPU of all: its
	# mutation proof) first: the longest packages start at once, so none of
	# them is the tail.
	local first='/test/|/pkg/compiler/puppet$'
	# shellcheck disable=SC2046 # one word per package
	{
		$GO test -count=1 -p "$P" -timeout "$TIMEOUT" -exec "$PWD/scripts/testexec.sh" \
			$(echo "$pkgs" | grep -E "$first") $(echo "$pkgs" | grep -v -E "$first") &&
			$GO test -count=1 -short -exec "$PWD/scripts/testexec.sh" ./bench/...
	} 2>&1 | tee -a "$LOG"
}

# The CDK app: in the background from the start (see the top).
INFRA_LOG=$LOG.infra
# In its own process group (setsid), so that stop_infra ends make, go and
# node with it.
setsid bash -c 'start=$(date +%s)
make --no-print-directory infra-test && make --no-print-directory synth
rc=$?
echo $(($(date +%s) - start)) >"$0.seconds"
exit $rc' "$INFRA_LOG" >"$INFRA_LOG" 2>&1 &
INFRA_PID=$!

# infra_done waits for the CDK app's tests and synth, and fails with their
# output when they failed.
infra_done() {
	local rc=0
	wait "$INFRA_PID" || rc=$?
	INFRA_PID=
	if [ $rc -ne 0 ]; then
		echo "make test: make infra-test or make synth failed (exit $rc); their output ($INFRA_LOG):" >&2
		tail -n 60 "$INFRA_LOG" >&2
		return $rc
	fi
	echo "make infra-test and make synth took $(cat "$INFRA_LOG.seconds") s, beside go test"
}

phase "go test ./... (bench/ -short)" gotest
phase "PuppetDB (scripts/puppetdb.sh start)" puppetdb_started
stop_puppetdb # the phases below do not need it
phase "make infra-test, make synth (started with go test)" infra_done
phase "make fuzz" make --no-print-directory fuzz
