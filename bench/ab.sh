#!/usr/bin/env bash
# bench/ab.sh REV [ROUNDS]: an alternating A/B of the front door between the
# broker of git revision REV (A) and this checkout's (B), the way to show
# that a change did not make the farm slower on a machine whose speed
# drifts within the hour: both run in the same session, in turns (A B, then
# B A, ...), ROUNDS rounds (default 3).
#
# Each turn starts `broker dev` on bench/environments (this checkout's copy,
# for both) with a fresh --data and runs this checkout's bench/loadgen
# catalog phase: cached catalogs (identical facts) and fresh facts (a new
# facts timestamp per request, as successive agent runs send) at
# AB_CLIENTS clients (default 16) for AB_DURATION each (default 10s); then
# it stops the broker. It prints one row per turn (requests/s and the
# broker's CPU per request, for both kinds) and the median of each side.
# Loopback only; it ends only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."

rev=${1:?usage: bench/ab.sh REV [ROUNDS]}
rounds=${2:-3}
clients=${AB_CLIENTS:-16}
duration=${AB_DURATION:-10s}
nodes=${AB_NODES:-32}

say() { echo "ab: $*" >&2; }
work=$(mktemp -d /tmp/compilefarm-ab.XXXXXX)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill -TERM -- -"$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	git worktree remove --force "$work/a-src" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building A ($rev) and B (this checkout, $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'))"
git worktree add --detach "$work/a-src" "$rev" >/dev/null 2>&1 || { say "cannot check out $rev"; exit 1; }
(cd "$work/a-src" && go build -o "$work/a" ./broker)
go build -o "$work/b" ./broker
go build -o "$work/loadgen" ./bench/loadgen

# turn SIDE N: one broker, the loadgen catalog phase, one row.
turn() {
	local side=$1 n=$2 log="$work/$1-$2.log" line addr metrics admin
	setsid "$work/$side" dev --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --pcp-listen 127.0.0.1:0 \
		--environments bench/environments --data "$work/data-$side-$n" --autosign >"$log" 2>&1 &
	pid=$!
	for _ in $(seq 1 360); do
		line=$(grep -m1 'compilefarm dev is up' "$log" 2>/dev/null) && break
		kill -0 "$pid" 2>/dev/null || { say "broker $side exited before it was up:"; tail -20 "$log" >&2; exit 1; }
		sleep 0.5
	done
	[ -n "${line:-}" ] || { say "broker $side did not come up in 3 minutes"; exit 1; }
	addr=$(sed -n 's/.*front_door=https:\/\/\([^ ]*\).*/\1/p' <<<"$line")
	metrics=$(sed -n 's/.*metrics=\(http:\/\/[^ ]*\/metrics\).*/\1/p' <<<"$line")
	admin=$(sed -n 's/.* admin=\(http:\/\/[^ ]*\).*/\1/p' <<<"$line")
	"$work/loadgen" --target "$addr" --metrics "$metrics" --admin "$admin" --phase catalog --clients "$clients" \
		--nodes "$nodes" --facts same,fresh --duration "$duration" --json="$work/$side-$n.json" >/dev/null 2>"$work/$side-$n.loadgen.log" ||
		{ say "loadgen against $side failed:"; tail -20 "$work/$side-$n.loadgen.log" >&2; exit 1; }
	kill -TERM -- -"$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
	python3 - "$work/$side-$n.json" "$side" "$n" <<'EOF'
import json, sys
runs = {r["facts"]: r for r in json.load(open(sys.argv[1]))["runs"] if r["phase"] == "catalog"}
c, f = runs["same"], runs["fresh"]
print("| %s | %s | %.0f | %.0f | %.0f | %.0f |" % (sys.argv[3], sys.argv[2], c["per_second"], c.get("broker_cpu_us_per_request", 0),
      f["per_second"], f.get("broker_cpu_us_per_request", 0)))
EOF
}

rows="$work/rows"
: >"$rows"
echo "| round | side | cached catalogs/s | broker µs/request | fresh-facts catalogs/s | broker µs/request |"
echo "|---|---|---|---|---|---|"
for n in $(seq 1 "$rounds"); do
	if [ $((n % 2)) -eq 1 ]; then order="a b"; else order="b a"; fi
	for side in $order; do
		say "round $n of $rounds: $side"
		turn "$side" "$n" | tee -a "$rows"
	done
done
python3 - "$rows" "$rev" <<'EOF'
import statistics, sys
cols = {"a": [[], [], [], []], "b": [[], [], [], []]}
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.strip().strip("|").split("|")]
    for i in range(4):
        cols[f[1]][i].append(float(f[2 + i]))
print()
print("| median | cached catalogs/s | broker µs/request | fresh-facts catalogs/s | broker µs/request |")
print("|---|---|---|---|---|")
for side, name in (("a", "A " + sys.argv[2]), ("b", "B this checkout")):
    print("| %s | %s |" % (name, " | ".join("%.0f" % statistics.median(c) for c in cols[side])))
a, b = [statistics.median(c) for c in cols["a"]], [statistics.median(c) for c in cols["b"]]
print()
print("B ÷ A: cached %.2f× the requests/s at %.2f× the CPU per request; fresh facts %.2f× at %.2f×" % (b[0] / a[0], b[1] / a[1], b[2] / a[2], b[3] / a[3]))
EOF
