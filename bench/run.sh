#!/usr/bin/env bash
# `make bench`: measures the farm's front door like a fleet of Puppet agents
# and writes docs/benchmarks.md.
#
#  1. starts `bin/broker dev` on free loopback ports with a fresh --data and
#     the benchmark environment (bench/environments: ~300 KB catalog);
#  2. runs bench/loadgen: cached catalog requests over keep-alive at 1, 16
#     and 128 clients (identical facts, then fresh facts per request), new
#     mTLS connections per request at 16 clients, and fact churn (compiles
#     per 1,000 fact uploads on the benchmark environment); then
#     bench/agentsim: a herd of whole agent runs (its warm-up round
#     compiles each agent first); then stops the broker (its process group:
#     the Ruby workers too); then the big herd (BENCH_HERD_AGENTS) on a
#     broker of its own, and the same herd against bench/tlsfloor (the
#     front door's TLS and HTTP with no farm work: the floor under its CPU
#     per run);
#  3. runs bench/pcpbench: the PCP broker (pkg/pcp/broker) alone in a
#     process of its own holding PCPBENCH_CONNS connections opened as
#     pxp-agent opens them (memory per connection, messages routed per
#     second, re-association after a restart); it fails the script, after
#     the report is written;
#  4. builds the corpus of real modules (internal/corpus: loadgen
#     --build-corpus) into the work directory, starts a second broker on it
#     the same way (fresh --data), runs loadgen's corpus phase (compiles per
#     1,000 check-ins with real agents' fact churn) and stops it; failed
#     compiles there fail the script, after it has written the report;
#  5. runs bench/scalebench (the control paths at 100,000 nodes: nodes
#     created through the intake, a code deploy, code and release status,
#     store reads per compile as the node count grows, the same on the AWS
#     drivers against the emulators with their DynamoDB calls, and exported
#     resources; it installs the emulators first, with scripts/emulators/);
#     it fails the script, after the report is written;
#  5b. runs bench/pdbbench against a real PuppetDB (scripts/puppetdb.sh,
#     started in the background at the beginning in the work directory, or
#     the one COMPILEFARM_PUPPETDB_DIR names when its env file exists):
#     commands sent per 1,000 steady agent runs, commands delivered per
#     second, a fact change to the dependent node's recompile through
#     PuppetDB, and the query refresh's cost; it starts its own broker; it
#     fails the script, after the report is written;
#  6. runs the warm compile benchmark of the puppet engine, the CA and the
#     classifier benchmarks, and the queue-age scaling simulation (pkg/scaling:
#     a model of both compile lanes on AWS under a 100,000-node deploy, with
#     the lanes' default settings; no broker, about a second);
#  7. writes docs/benchmarks.md.
#
# `bench/run.sh --simulation` prints just the simulation's section of
# docs/benchmarks.md (step 6's last part) and exits: no broker, no build.
#
# Knobs (environment): BENCH_DURATION (10s per run), BENCH_NODES (32),
# BENCH_CLIENTS (1,16,128), BENCH_CONN_CLIENTS (16), BENCH_FACTS (same,fresh),
# BENCH_WORKERS (nproc), BENCH_BENCHTIME (10x), BENCH_OUT (docs/benchmarks.md),
# BENCH_UPLOADS (1000: churn phase fact uploads), BENCH_CORPUS_NODES (36:
# corpus phase nodes, twice the corpus's 18), BENCH_CORPUS_UPLOADS (1000:
# corpus phase check-ins), BENCH_QUIET_WAIT (120: seconds to wait for other
# processes to leave the CPUs alone before starting; the tables show how much
# CPU they took anyway), BENCH_AGENTS (200: agentsim's herd), BENCH_AGENT_WINDOW
# (10s: the herd's window), BENCH_SCALE_SIZES (1000,10000,100000: scalebench's
# node counts on the embedded store), BENCH_SCALE_AWS_SIZES (1000,10000: on the
# AWS drivers and emulators), BENCH_SCALE_EXPORT_SIZES (2000: exported
# resources), BENCH_SCALE_TMPDIR (/dev/shm when it exists: where scalebench's
# stores write; tmpfs, so that 100,000 nodes do not wait for the disk's syncs).
# An empty BENCH_SCALE_*SIZES skips that part of scalebench; all three empty
# skip it.
# BENCH_HERD_AGENTS (10000: the big herd; 0 skips it), BENCH_HERD_WINDOW (60s),
# BENCH_HERD_DIR (.tools/bench-herd: the big herd's broker data and agents'
# certificates, kept between runs: the first run enrols and compiles every
# agent once, which takes about half an hour on 2 cores; later runs reuse them).
# PCPBENCH_CONNS (10000: PCP connections held by one broker; 0 skips it),
# PCPBENCH_DURATION (10s: the PCP routing phase).
# PDBBENCH_AGENTS (100: pdbbench's agents, each running 10 steady times and
# 5 times while PuppetDB is held; 0 skips the measurement, not the start of
# PuppetDB, which go test ./bench/... needs), PDBBENCH_QUERY_SIZES (10,100:
# the distinct queries recorded when the refresh is timed).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${BENCH_DURATION:-10s}
NODES=${BENCH_NODES:-32}
CLIENTS=${BENCH_CLIENTS:-1,16,128}
CONN_CLIENTS=${BENCH_CONN_CLIENTS:-16}
FACTS=${BENCH_FACTS:-same,fresh}
WORKERS=${BENCH_WORKERS:-$(nproc)}
BENCHTIME=${BENCH_BENCHTIME:-10x}
OUT=${BENCH_OUT:-docs/benchmarks.md}
UPLOADS=${BENCH_UPLOADS:-1000}
CORPUS_NODES=${BENCH_CORPUS_NODES:-36}
CORPUS_UPLOADS=${BENCH_CORPUS_UPLOADS:-1000}
QUIET_WAIT=${BENCH_QUIET_WAIT:-120}
AGENTS=${BENCH_AGENTS:-200}
AGENT_WINDOW=${BENCH_AGENT_WINDOW:-10s}
HERD_AGENTS=${BENCH_HERD_AGENTS:-10000}
HERD_WINDOW=${BENCH_HERD_WINDOW:-60s}
HERD_DIR=$(realpath -m "${BENCH_HERD_DIR:-.tools/bench-herd}") # absolute: the broker compiles from it
PCP_CONNS=${PCPBENCH_CONNS:-10000}
PCP_DURATION=${PCPBENCH_DURATION:-10s}
PDB_AGENTS=${PDBBENCH_AGENTS:-100}
PDB_QUERY_SIZES=${PDBBENCH_QUERY_SIZES:-10,100}
# Set but empty skips a part: hence - and not :-.
SCALE_SIZES=${BENCH_SCALE_SIZES-1000,10000,100000}
SCALE_AWS_SIZES=${BENCH_SCALE_AWS_SIZES-1000,10000}
SCALE_EXPORT_SIZES=${BENCH_SCALE_EXPORT_SIZES-2000}
default_scale_tmp=""
if [ -d /dev/shm ] && [ -w /dev/shm ]; then default_scale_tmp=/dev/shm; fi
SCALE_TMPDIR=${BENCH_SCALE_TMPDIR-$default_scale_tmp}
BROKER=bin/broker
ENVS=bench/environments

say() { printf 'bench: %s\n' "$*" >&2; }

# simulation_section prints docs/benchmarks.md's section on queue-age
# scaling: its introduction, then the Markdown the simulation tests print
# (their settings, tables and what the tables show, computed from the run),
# without go test's own lines. It returns the tests' exit status; when they
# fail, the section says so and shows the end of their output.
sim_cmd=(go test -count=1 -run 'TestDeployWaveSimulation|TestUrgentSurgeSimulation' -v ./pkg/scaling)
simulation_section() {
  local out rc=0 a shown=()
  say "queue-age scaling simulation: ${sim_cmd[*]}"
  out=$("${sim_cmd[@]}" 2>&1) || rc=$?
  echo "## Queue-age scaling: a 100,000-node deploy (simulation)"
  echo
  echo "A model, not a measurement: \`pkg/scaling.Simulate\` replays both compile lanes second by"
  echo "second against the scaler's own decision (\`scaling.Decide\`, the code \`functions/scaler\`"
  echo "runs), with no AWS and no wall clock, and with the lanes' default settings"
  echo "(\`scaling.Urgent\`, \`scaling.Bulk\`), the ones the stack in infra/ deploys. Produced by"
  echo
  echo '```'
  for a in "${sim_cmd[@]}"; do
    case $a in *[!A-Za-z0-9_./=-]*) shown+=("'$a'") ;; *) shown+=("$a") ;; esac
  done
  echo "${shown[*]}"
  echo '```'
  echo
  echo "**Load.** A code deploy enqueues a recompile of each of 100,000 nodes on the bulk lane at"
  echo "t=0. Meanwhile 100,000 agents check in every 30 minutes (55.6 a second) and 1% of the"
  echo "check-ins need a compile on the urgent lane (0.56 a second, Poisson, fixed seed)."
  echo
  echo "**Model** (\`scaling.DefaultModel\`). Each lane has its own event source mapping, so its own"
  echo "MaximumConcurrency, its own pollers and its own batching. A poller invokes the function as"
  echo "soon as it has a full batch (the lane's batch size); with fewer jobs waiting, it waits for"
  echo "more until the oldest has waited the lane's batching window, then invokes with what it has."
  echo "An invocation compiles its batch one job after the other; a new execution environment first"
  echo "spends a cold start (Ruby and Puppet loading); a job is deleted when its batch ends."
  echo "Lambda's pollers add concurrent invocations at a bounded rate. \`ApproximateAgeOfOldestMessage\`"
  echo "is the age of the oldest job not yet deleted, queued or in flight, and"
  echo "\`ApproximateNumberOfMessagesNotVisible\` the jobs in flight (received by an invocation, not"
  echo "yet deleted); both are published as the Maximum of each minute and readable after a lag."
  echo "The scaler runs every minute (the EventBridge schedule; an alarm's state change only invokes"
  echo "it earlier, reading the same metrics)."
  if [ "$rc" -eq 0 ]; then
    printf '%s\n' "$out" | grep -vE '^(=== (RUN|PAUSE|CONT) |--- (PASS|FAIL|SKIP): |PASS$|FAIL$|ok[[:space:]]|FAIL[[:space:]])' | cat -s
  else
    echo
    echo "**The simulation failed in this run (exit $rc)**: the end of its output:"
    echo
    echo '```'
    printf '%s\n' "$out" | tail -n 20
    echo '```'
  fi
  return "$rc"
}
if [ "${1:-}" = "--simulation" ]; then
  sim_only_rc=0
  simulation_section || sim_only_rc=$?
  exit "$sim_only_rc"
fi

if [ ! -x "$BROKER" ]; then
  say "building $BROKER"
  go build -o "$BROKER" ./broker
fi

work=$(mktemp -d /tmp/cfbench.XXXXXX)
broker_pid="" broker_log=""
pdb_dir="" pdb_start_pid="" pdb_started_here=0
stop_broker() {
  [ -n "$broker_pid" ] || return 0
  if kill -0 "$broker_pid" 2>/dev/null; then
    say "stopping the broker (pid $broker_pid, its process group)"
    kill -TERM -- "-$broker_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$broker_pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$broker_pid" 2>/dev/null; then
      say "the broker did not stop in 20s: SIGKILL to its process group"
      kill -KILL -- "-$broker_pid" 2>/dev/null || true
    fi
  fi
  wait "$broker_pid" 2>/dev/null || true
  broker_pid=""
}
# stop_puppetdb stops the PuppetDB this script started (a start still
# running first); one COMPILEFARM_PUPPETDB_DIR named is left alone.
stop_puppetdb() {
  [ "$pdb_started_here" = 1 ] || return 0
  if [ -n "$pdb_start_pid" ]; then
    kill "$pdb_start_pid" 2>/dev/null || true
    wait "$pdb_start_pid" 2>/dev/null || true
    pdb_start_pid=""
  fi
  scripts/puppetdb.sh stop "$pdb_dir" >>"$work/puppetdb.log" 2>&1 || say "scripts/puppetdb.sh stop $pdb_dir failed; see its log"
  pdb_started_here=0
}
cleanup() {
  local rc=$?
  stop_broker
  stop_puppetdb
  if [ $rc -ne 0 ] && [ -n "$broker_log" ] && [ -f "$broker_log" ]; then
    say "failed (exit $rc); last lines of the broker log ($broker_log):"
    tail -n 30 "$broker_log" >&2 || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# busy_cores prints how many CPUs the machine kept busy over the next 2 s.
busy_cores() {
  local a b
  if ! a=$(head -n1 /proc/stat 2>/dev/null); then echo 0; return; fi
  sleep 2
  b=$(head -n1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    n = split(a, x, " "); split(b, y, " "); t = 0; i = 0
    for (k = 2; k <= 9 && k <= n; k++) { d = y[k] - x[k]; t += d; if (k == 5 || k == 6) i += d }
    printf "%.2f", (t - i) / 200 }'
}

# The machine, before we load it.
cpu_model=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
[ -n "$cpu_model" ] || cpu_model=unknown
ncpu=$(nproc)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo 2>/dev/null || echo unknown)
go_version=$(go env GOVERSION)
puppet_version=$(puppet --version 2>/dev/null || echo "not installed")
kernel=$(uname -sr)

say "building the load generator"
go build -o "$work/loadgen" ./bench/loadgen
go build -o "$work/agentsim" ./bench/agentsim
go build -o "$work/scalebench" ./bench/scalebench
go build -o "$work/pcpbench" ./bench/pcpbench
go build -o "$work/tlsfloor" ./bench/tlsfloor
go build -o "$work/pdbbench" ./bench/pdbbench

# A real PuppetDB for pdbbench and its test: the one COMPILEFARM_PUPPETDB_DIR
# names when it is up, else one of our own, started in the background now
# (20-90 s, mostly the JVM; idle, it then takes ~0.2% of a CPU and ~600 MB)
# and stopped at the end.
if [ -n "${COMPILEFARM_PUPPETDB_DIR:-}" ] && [ -f "$COMPILEFARM_PUPPETDB_DIR/env" ]; then
  pdb_dir=$COMPILEFARM_PUPPETDB_DIR
  say "PuppetDB: reusing the one in $pdb_dir (COMPILEFARM_PUPPETDB_DIR)"
else
  pdb_dir=$work/puppetdb
  mkdir -p "$pdb_dir"
  chmod 0711 "$work" # PostgreSQL's user must traverse it to its data
  say "PuppetDB: starting one in $pdb_dir, in the background (scripts/puppetdb.sh start; log $work/puppetdb.log)"
  scripts/puppetdb.sh start "$pdb_dir" >"$work/puppetdb.log" 2>&1 &
  pdb_start_pid=$!
  pdb_started_here=1
fi
export COMPILEFARM_PUPPETDB_DIR=$pdb_dir
# puppetdb_up waits for a start this script made, and fails with its log
# when it failed.
puppetdb_up() {
  local rc=0
  [ -n "$pdb_start_pid" ] || return 0
  wait "$pdb_start_pid" || rc=$?
  pdb_start_pid=""
  if [ "$rc" -ne 0 ]; then
    say "scripts/puppetdb.sh start $pdb_dir failed (exit $rc; make puppetdb-deps installs what it needs); its log:"
    tail -n 30 "$work/puppetdb.log" >&2
    return "$rc"
  fi
}
scale_run=0
if [ -n "$SCALE_SIZES$SCALE_AWS_SIZES$SCALE_EXPORT_SIZES" ]; then scale_run=1; fi
if [ "$scale_run" = 1 ] && [ -n "$SCALE_AWS_SIZES" ]; then
  say "installing the S3, DynamoDB and SQS emulators scalebench's AWS part runs against (once; cached in .tools)"
  for s in scripts/emulators/s3.sh scripts/emulators/dynamodb.sh scripts/emulators/sqs.sh; do
    "$s" >&2 || { say "$s failed: scalebench's AWS part needs it (BENCH_SCALE_AWS_SIZES= skips that part)"; exit 1; }
  done
fi

# The measurement commands' own tests, end-to-end ones included (a herd
# against a real broker, a small PCP run, scalebench on the emulators):
# make test runs them with -short only, so they run here, before anything
# is measured with the commands they check.
say "testing the measurement commands (go test ./bench/...)"
puppetdb_up || exit 1
go test -count=1 ./bench/... >&2 || { say "go test ./bench/... failed (above): fix the measurement commands before measuring with them"; exit 1; }

waited=0
busy=$(busy_cores)
while awk -v b="$busy" 'BEGIN { exit !(b > 0.3) }' && [ "$waited" -lt "$QUIET_WAIT" ]; do
  say "other processes keep $busy CPUs busy; waiting for a quieter machine (${waited}s of ${QUIET_WAIT}s)"
  sleep 8
  waited=$((waited + 10))
  busy=$(busy_cores)
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
started=$(date -u +'%Y-%m-%d %H:%M UTC')
say "CPUs busy before the start: $busy (load average $load_before)"

# start_broker ENVIRONMENTS DATA LOG starts `$BROKER dev` on free loopback
# ports with a fresh DATA, in its own process group (setsid) so that
# stopping it stops its Ruby compile workers too, and waits until it is up.
# Sets broker_cmd, broker_pid, broker_log, addr, metrics and admin.
start_broker() {
  broker_log=$3
  broker_cmd=("$BROKER" dev --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --pcp-listen 127.0.0.1:0
    --environments "$1" --data "$2" --workers "$WORKERS" --autosign)
  say "starting: ${broker_cmd[*]}"
  setsid "${broker_cmd[@]}" >"$broker_log" 2>&1 &
  broker_pid=$!
  addr="" metrics="" admin=""
  local line
  for _ in $(seq 1 360); do
    if line=$(grep -m1 'compilefarm dev is up' "$broker_log" 2>/dev/null); then
      addr=$(sed -n 's/.*front_door=https:\/\/\([^ ]*\).*/\1/p' <<<"$line")
      metrics=$(sed -n 's/.*metrics=\(http:\/\/[^ ]*\/metrics\).*/\1/p' <<<"$line")
      admin=$(sed -n 's/.* admin=\(http:\/\/[^ ]*\).*/\1/p' <<<"$line")
      break
    fi
    kill -0 "$broker_pid" 2>/dev/null || { say "the broker exited before it was up"; exit 1; }
    sleep 0.5
  done
  [ -n "$addr" ] && [ -n "$metrics" ] && [ -n "$admin" ] || { say "the broker did not come up in 3 minutes"; exit 1; }
  say "broker up (pid $broker_pid): front door https://$addr, metrics $metrics, operator API $admin"
}

# 1. The broker on the benchmark environment.
start_broker "$ENVS" "$work/data" "$work/broker.log"
bench_broker_cmd=("${broker_cmd[@]}")

# 2. Catalogs, then new connections.
lg_common=(--target "$addr" --metrics "$metrics" --admin "$admin" --environment production --duration "$DURATION")
cat_cmd=("$work/loadgen" "${lg_common[@]}" --phase catalog --clients "$CLIENTS" --nodes "$NODES" --facts "$FACTS"
  --json="$work/catalog.json" --markdown="$work/catalog.md" --tsv="$work/catalog.tsv")
say "catalog runs: ${cat_cmd[*]}"
"${cat_cmd[@]}" >&2
conn_cmd=("$work/loadgen" "${lg_common[@]}" --phase connections --clients "$CONN_CLIENTS" --nodes "$CONN_CLIENTS"
  --json="$work/conns.json" --markdown="$work/conns.md" --tsv="$work/conns.tsv")
say "connection runs: ${conn_cmd[*]}"
"${conn_cmd[@]}" >&2
churn_cmd=("$work/loadgen" "${lg_common[@]}" --phase churn --nodes "$NODES" --uploads "$UPLOADS" --used-change 0.01
  --prefix churn --json="$work/churn.json" --markdown="$work/churn.md")
say "fact churn: ${churn_cmd[*]}"
"${churn_cmd[@]}" >&2
# 3. Whole agent runs (bench/agentsim): a herd of agents, each with its own
# certificate, each run a new TLS connection, pluginsync, the catalog with
# fresh volatile facts and a report; the warm-up round compiles every agent.
agents_cmd=("$work/agentsim" --target "$addr" --metrics "$metrics" --broker-pid "$broker_pid"
  --mode herd --agents "$AGENTS" --window "$AGENT_WINDOW" --state "$work/agentsim-state"
  --json="$work/agents.json" --markdown="$work/agents.md")
say "agent runs: ${agents_cmd[*]}"
agents_rc=0
"${agents_cmd[@]}" >&2 || agents_rc=$?
stop_broker

# 3b. The big herd (bench/agentsim): BENCH_HERD_AGENTS agents within
# BENCH_HERD_WINDOW, on the herd environment (a lighter catalog, so that
# the one-time first compiles of 10,000 agents take minutes, not hours),
# with a broker whose data and agents' certificates are kept in
# BENCH_HERD_DIR. The warm-up (enrolment and every agent's first compile)
# runs only when that directory has not seen this many agents warmed up.
herd_rc=0 herd_warm_cmd=() herd_cmd=() floor_cap_cmd=() floor_cmd=() floor_herd_cmd=() herd_cat_cmd=()
if [ "$HERD_AGENTS" -gt 0 ]; then
  # The herd environment: the benchmark environment with the herd's counts
  # (bench/herd/common.yaml), assembled where the kept data is.
  herd_envs=$HERD_DIR/environments
  rm -rf "$herd_envs" && mkdir -p "$herd_envs"
  cp -r "$ENVS/production" "$herd_envs/production"
  cp bench/herd/common.yaml "$herd_envs/production/data/common.yaml"
  start_broker "$herd_envs" "$HERD_DIR/data" "$work/herd-broker.log"
  herd_broker_cmd=("${broker_cmd[@]}")
  herd_common=("$work/agentsim" --target "$addr" --metrics "$metrics" --broker-pid "$broker_pid"
    --mode herd --agents "$HERD_AGENTS" --warmup=false --state "$HERD_DIR/state" --timeout 4h)
  herd_warm_cmd=("${herd_common[@]}" --window 0 --concurrency 64 --rounds 1)
  if [ ! -f "$HERD_DIR/warm-$HERD_AGENTS" ]; then
    say "big herd warm-up (enrolment and first compiles of $HERD_AGENTS agents, once): ${herd_warm_cmd[*]}"
    if "${herd_warm_cmd[@]}" --json="$work/herd-warm.json" >&2; then
      touch "$HERD_DIR/warm-$HERD_AGENTS"
    else
      herd_rc=$?
    fi
  else
    say "big herd: $HERD_DIR has $HERD_AGENTS agents warmed up already"
  fi
  # 128 runs at once: enough for 167 runs/s (a run takes ~0.7 s under load),
  # and under the broker's admission queue (32 in flight + 256 waiting); 256
  # made longer waits and more CPU per run on 2 cores, 512 made 503s.
  herd_cmd=("${herd_common[@]}" --window "$HERD_WINDOW" --node-request never --concurrency 128 --rounds 2)
  if [ "$herd_rc" -eq 0 ]; then
    say "big herd: ${herd_cmd[*]}"
    "${herd_cmd[@]}" --json="$work/herd.json" --markdown="$work/herd.md" >&2 || herd_rc=$?
  fi
  # The catalog request with fresh facts alone (the ≤ 250 µs target), on
  # the herd's broker and environment: 16 clients over keep-alive.
  herd_cat_cmd=("$work/loadgen" --target "$addr" --metrics "$metrics" --admin "$admin" --environment production
    --duration 30s --phase catalog --clients 16 --nodes 16 --facts fresh)
  if [ "$herd_rc" -eq 0 ]; then
    say "big herd: catalog requests with fresh facts: ${herd_cat_cmd[*]}"
    "${herd_cat_cmd[@]}" --json="$work/herd-catalog.json" --markdown="$work/herd-catalog.md" >&2 || herd_rc=$?
  fi
  # The floor (bench/tlsfloor): the same herd against a server with the
  # front door's TLS and net/http set-up and no farm work, answering with
  # what the broker answered one agent (captured now, as that agent).
  floor_cap_cmd=("$work/tlsfloor" capture --from "$addr" --ca-dir "$HERD_DIR/data/ca"
    --cert "$HERD_DIR/state/agentsim-00000.agentsim.test.pem" --out "$work")
  if [ "$herd_rc" -eq 0 ]; then
    say "floor: capturing the answers: ${floor_cap_cmd[*]}"
    "${floor_cap_cmd[@]}" >&2 || herd_rc=$?
  fi
  stop_broker
  floor_cmd=("$work/tlsfloor" serve --ca-dir "$HERD_DIR/data/ca" --answers "$work")
  if [ "$herd_rc" -eq 0 ]; then
    say "floor: ${floor_cmd[*]}"
    broker_log=$work/tlsfloor.log
    setsid "${floor_cmd[@]}" >"$broker_log" 2>&1 &
    broker_pid=$!
    addr=""
    for _ in $(seq 1 100); do
      addr=$(sed -n 's/.*front_door=https:\/\/\([^ ]*\).*/\1/p' "$broker_log")
      [ -n "$addr" ] && break
      kill -0 "$broker_pid" 2>/dev/null || break
      sleep 0.2
    done
    [ -n "$addr" ] || { say "tlsfloor did not come up"; exit 1; }
    floor_herd_cmd=("$work/agentsim" --target "$addr" --broker-pid "$broker_pid" --mode herd --agents "$HERD_AGENTS"
      --warmup=false --state "$HERD_DIR/state" --timeout 1h --window "$HERD_WINDOW" --node-request never --concurrency 128 --rounds 2)
    say "floor: ${floor_herd_cmd[*]}"
    "${floor_herd_cmd[@]}" --json="$work/floor.json" --markdown="$work/floor.md" >&2 || herd_rc=$?
    stop_broker
  fi
fi

# 3c. The PCP broker holding PCPBENCH_CONNS connections (bench/pcpbench):
# a broker process of its own (pkg/pcp/broker over the farm's TLS settings,
# no farm around it) and a driver that opens the connections as pxp-agent
# does, routes echo requests through it and restarts it. pcpbench writes
# its section of the report, even when it fails; the script fails after
# writing the report.
pcp_rc=0
pcp_cmd=("$work/pcpbench" run --conns "$PCP_CONNS" --duration "$PCP_DURATION" --out "$work/pcp.md")
if [ "$PCP_CONNS" -gt 0 ]; then
  say "PCP broker: ${pcp_cmd[*]}"
  "${pcp_cmd[@]}" >&2 || pcp_rc=$?
fi

# 4. The corpus of real modules, on a second broker: compiles per 1,000
# check-ins with real agents' fact churn. Failed compiles make loadgen exit
# non-zero; the report is written first, then the script fails.
build_cmd=("$work/loadgen" --build-corpus "$work/corpus")
say "building the corpus: ${build_cmd[*]}"
corpus_envs=$("${build_cmd[@]}")
start_broker "$corpus_envs" "$work/corpus-data" "$work/corpus-broker.log"
corpus_broker_cmd=("${broker_cmd[@]}")
corpus_cmd=("$work/loadgen" --target "$addr" --metrics "$metrics" --admin "$admin" --environment production --phase corpus
  --nodes "$CORPUS_NODES" --uploads "$CORPUS_UPLOADS" --used-change 0.01 --domain example.test --prefix corpus
  --json="$work/corpus.json" --markdown="$work/corpus.md")
say "corpus check-ins: ${corpus_cmd[*]}"
corpus_rc=0
"${corpus_cmd[@]}" >&2 || corpus_rc=$?
stop_broker

# 5. The control paths at scale (bench/scalebench), in one process with its
# own compile workers: no broker runs meanwhile. Its report is written even
# when it fails; the script fails after writing docs/benchmarks.md.
scale_cmd=("$work/scalebench" --sizes "$SCALE_SIZES" --aws-sizes "$SCALE_AWS_SIZES" --export-sizes "$SCALE_EXPORT_SIZES"
  --workers "$WORKERS")
if [ -n "$SCALE_TMPDIR" ]; then scale_cmd+=(--tmpdir "$SCALE_TMPDIR"); fi
scale_cmd+=(--json="$work/scale.json" --markdown="$work/scale.md")
scale_rc=0
if [ "$scale_run" = 1 ]; then
  say "scale: ${scale_cmd[*]}"
  "${scale_cmd[@]}" >&2 || scale_rc=$?
  if [ "$scale_rc" -ne 0 ]; then say "scalebench FAILED (exit $scale_rc); the report shows what it measured before"; fi
else
  say "BENCH_SCALE_SIZES, BENCH_SCALE_AWS_SIZES and BENCH_SCALE_EXPORT_SIZES are empty: skipping scalebench"
fi

# 5b. What feeding PuppetDB costs (bench/pdbbench): its own broker on the
# herd environment with pdbbench's site manifest, bench/agentsim's agents,
# the PuppetDB started above. It writes its section even when a phase
# fails; the script fails after writing docs/benchmarks.md.
pdb_cmd=("$work/pdbbench" --puppetdb-dir "$pdb_dir" --broker "$BROKER" --agentsim "$work/agentsim" --workers "$WORKERS"
  --agents "$PDB_AGENTS" --query-sizes "$PDB_QUERY_SIZES")
pdb_rc=0
if [ "$PDB_AGENTS" -gt 0 ]; then
  say "PuppetDB: ${pdb_cmd[*]}"
  "${pdb_cmd[@]}" --markdown "$work/pdb.md" --json "$work/pdb.json" >&2 || pdb_rc=$?
  if [ "$pdb_rc" -ne 0 ]; then say "pdbbench FAILED (exit $pdb_rc); the report shows what it measured before"; fi
fi
stop_puppetdb

# run_bench WHAT LINES CMD...: runs a Go benchmark command, shows the lines
# of its output matching LINES (or its tail when it fails) on stderr, and
# prints its output, or FAILED.
run_bench() {
  local what=$1 lines=$2 out
  shift 2
  say "$what: $*"
  if out=$("$@" 2>&1); then
    printf '%s\n' "$out" | grep -E "$lines" >&2 || true
    printf '%s\n' "$out"
  else
    say "the $what failed:"
    printf '%s\n' "$out" | tail -n 20 >&2
    echo FAILED
  fi
}

# 6. Warm compile time of the puppet engine.
bench_cmd=(go test -run '^$' -bench . -benchtime "$BENCHTIME" ./pkg/compiler/puppet)
compile_out=""
if grep -qs 'func BenchmarkCompileWarm' pkg/compiler/puppet/*_test.go; then
  compile_out=$(run_bench "compile benchmark" '^(Benchmark|ok|PASS|cpu)' "${bench_cmd[@]}")
else
  say "BenchmarkCompileWarm is absent from pkg/compiler/puppet: skipping the compile benchmark"
fi

# 6b. Certificate signing: the directory CA and the DynamoDB CA (dynalite on
# loopback, so it measures the CA's round trips, not DynamoDB's latency).
ca_cmd=(go test -run '^$' -bench 'BenchmarkSign$/rsa4096/submit|BenchmarkSignDynamoDB' -benchtime 200x ./pkg/cadir ./pkg/dynamostate)
ca_out=$(run_bench "CA benchmark" '^Benchmark' "${ca_cmd[@]}")

# 6c. The external node classifier's overhead per check-in: fork, exec and
# parse of a classifier that answers at once.
enc_cmd=(go test -run '^$' -bench 'BenchmarkExecClassify$' -benchtime 500x ./pkg/classifier)
enc_out=$(run_bench "classifier benchmark" '^Benchmark' "${enc_cmd[@]}")

# 6d. The front door's hot paths of a steady-state run, without TLS: the
# report summary (a scan of a 330 KB report), the catalog request with fresh
# facts, and the facts form decode.
hot_cmd=(go test -run '^$' -bench 'ReportSummary|PutReport|CatalogFreshFacts|CatalogFacts' -benchtime 200x ./pkg/frontdoor ./pkg/facts)
hot_out=$(run_bench "front door benchmarks" '^Benchmark' "${hot_cmd[@]}")

# 6e. The queue-age scaling simulation (a model: no broker). Its section is
# written even when it fails; the script fails after writing the report.
sim_rc=0
simulation_section >"$work/simulation.md" || sim_rc=$?
if [ "$sim_rc" -ne 0 ]; then say "the scaling simulation FAILED (exit $sim_rc)"; fi

# 7. The report. loadgen --tsv lines: phase clients facts per_second p50 p90 p99 max errors
pick() { awk -F'\t' -v p="$1" -v c="$2" -v f="$3" -v col="$4" '$1==p && $2==c && $3==f {print $col; exit}' "$5"; }
verdict() {
  awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN {
    if (v == "") { print "not measured"; exit }
    ok = (op == ">=") ? (v+0 >= t+0) : (v+0 <= t+0); print ok ? "**met**" : "**missed**" }'
}
rps16=$(pick catalog 16 same 4 "$work/catalog.tsv")
p99_16=$(pick catalog 16 same 7 "$work/catalog.tsv")
fresh16=$(pick catalog 16 fresh 4 "$work/catalog.tsv")
fresh16_p99=$(pick catalog 16 fresh 7 "$work/catalog.tsv")
conn_rps=$(pick connections "$CONN_CLIENTS" - 4 "$work/conns.tsv")
fmt() { [ -z "$1" ] || awk -v v="$1" -v f="$2" 'BEGIN {printf f, v}'; }
cmp_rps=${rps16:-$(awk -F'\t' '$4+0 > m {m = $4+0} END {print m+0}' "$work/catalog.tsv")}
others_max=$(cat "$work/catalog.json" "$work/conns.json" | sed -n 's/.*"other_processes_cores": \([0-9.]*\).*/\1/p' |
  awk '$1+0 > m {m = $1+0} END {printf "%.2f", m}')
ratio=$(awk -v r="$cmp_rps" 'BEGIN {printf "%.0f", r/0.6}')
# json_nums KEY FILE prints every number KEY has in FILE (indented JSON);
# json_num the first, last_json_num the last (a run's last round), nothing
# when FILE does not exist (that part did not run).
json_nums() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" "$2"; }
json_num() { json_nums "$1" "$2" | head -n1; }
last_json_num() { [ ! -f "$2" ] || json_nums "$1" "$2" | tail -n1; }
compiles=$(json_num compiles "$work/catalog.json")
compile_mean=$(json_num compile_mean_seconds "$work/catalog.json")
compile_p50=$(grep -A2 '"compile_ms"' "$work/catalog.json" | json_num p50 /dev/stdin || true)
# The big herd's CPU per run in its steady round (the last), the floor's
# beside it, and the fresh-facts catalog request's broker CPU: issue 10's
# targets. Empty when the big herd did not run.
herd_run_ms=$(last_json_num cpu_ms_per_run "$work/herd.json")
floor_run_ms=$(last_json_num cpu_ms_per_run "$work/floor.json")
herd_fresh_us=$(last_json_num broker_cpu_us_per_request "$work/herd-catalog.json")
floor_ratio=""
if [ -n "$herd_run_ms" ] && [ -n "$floor_run_ms" ]; then
  floor_ratio=$(awk -v b="$herd_run_ms" -v f="$floor_run_ms" 'BEGIN { if (f > 0) printf "%.2f", b/f }')
fi
# scale_cmdline is the scalebench command as a reader would run it.
scale_cmdline() {
  local a out=()
  for a in "${scale_cmd[@]}"; do
    case $a in
      "$work/scalebench") out+=("go run ./bench/scalebench") ;;
      --json=* | --markdown=*) ;;
      "") out+=("''") ;;
      *[!A-Za-z0-9_./,=:-]*) out+=("'$a'") ;;
      *) out+=("$a") ;;
    esac
  done
  echo "${out[*]}"
}
nocmd() { sed "s#$work/loadgen#loadgen#g; s#$work#\$TMP#g; s#--target [^ ]*#--target 127.0.0.1:PORT#; s#--metrics [^ ]*#--metrics http://127.0.0.1:PORT/metrics#; s#--admin [^ ]*#--admin http://127.0.0.1:PORT#; s#=[^ ]*\.\(json\|md\|tsv\)#=FILE#g"; }

mkdir -p "$(dirname "$OUT")"
{
  echo "# Benchmarks"
  echo
  echo "Generated by \`make bench\` (bench/run.sh) on $started. Re-run \`make bench\` to refresh"
  echo "this file; the numbers are from that one run on the machine described here."
  echo
  echo "## Machine"
  echo
  echo "- CPU: $cpu_model, $ncpu CPUs (nproc)"
  echo "- Memory: $mem"
  echo "- OS: $kernel"
  echo "- Go: $go_version; Puppet (compile engine): $puppet_version"
  echo "- Before the run: load average $load_before; other processes kept $busy CPUs busy"
  echo "  (over 2 s, after waiting up to ${QUIET_WAIT}s for a quiet machine)."
  echo "- The broker, its $WORKERS Ruby compile workers and the load generator share these CPUs."
  echo "  The tables give the load generator's CPU time, the broker's CPU per request (its"
  echo "  \`process_cpu_seconds_total\`: the cost that decides how much one core serves) and the"
  echo "  CPU that other processes took during each run (not ~0: the run was disturbed)."
  echo
  echo "## Commands"
  echo
  echo '```'
  echo "make bench   # = make deps build, then bench/run.sh"
  echo "# BENCH_DURATION=$DURATION BENCH_NODES=$NODES BENCH_CLIENTS=$CLIENTS BENCH_CONN_CLIENTS=$CONN_CLIENTS BENCH_FACTS=$FACTS BENCH_WORKERS=$WORKERS BENCH_BENCHTIME=$BENCHTIME"
  echo "# BENCH_UPLOADS=$UPLOADS BENCH_CORPUS_NODES=$CORPUS_NODES BENCH_CORPUS_UPLOADS=$CORPUS_UPLOADS BENCH_AGENTS=$AGENTS BENCH_AGENT_WINDOW=$AGENT_WINDOW BENCH_HERD_AGENTS=$HERD_AGENTS BENCH_HERD_WINDOW=$HERD_WINDOW"
  echo "# BENCH_SCALE_SIZES=$SCALE_SIZES BENCH_SCALE_AWS_SIZES=$SCALE_AWS_SIZES BENCH_SCALE_EXPORT_SIZES=$SCALE_EXPORT_SIZES BENCH_SCALE_TMPDIR=$SCALE_TMPDIR"
  echo "${bench_broker_cmd[*]}" | nocmd
  echo "${cat_cmd[*]}" | nocmd
  echo "${conn_cmd[*]}" | nocmd
  echo "${churn_cmd[*]}" | nocmd
  echo "${build_cmd[*]}" | nocmd
  echo "${corpus_broker_cmd[*]}" | nocmd
  echo "${corpus_cmd[*]}" | nocmd
  if [ "$scale_run" = 1 ]; then scale_cmdline | nocmd; fi
  echo "${bench_cmd[*]}"
  echo '```'
  echo
  echo "## Against the targets"
  echo
  echo "| target | measured | |"
  echo "|:--|--:|:--|"
  echo "| ≥ 2,000 cached catalog requests/s with keep-alive, 16 clients | $(fmt "$rps16" %.0f) req/s | $(verdict "$rps16" 2000 '>=') |"
  echo "| p99 ≤ 20 ms at 16 clients | $(fmt "$p99_16" %.1f) ms | $(verdict "$p99_16" 20 '<=') |"
  echo "| ≥ 500 new agent connections/s ($CONN_CLIENTS clients) | $(fmt "$conn_rps" %.0f) conn/s | $(verdict "$conn_rps" 500 '>=') |"
  echo "| Puppet Server 7.9.5: about 0.6 catalog requests/s for such a catalog (it compiles every one) | $(fmt "$cmp_rps" %.0f) req/s | ≈ ${ratio}× |"
  if [ -n "$fresh16" ]; then
    echo "| (not a target) 16 clients sending fresh facts in every request, as real agent runs do | $(fmt "$fresh16" %.0f) req/s, p99 $(fmt "$fresh16_p99" %.1f) ms | see below |"
  fi
  if [ "$HERD_AGENTS" -gt 0 ]; then
    echo "| ≤ 1.5 ms of broker CPU per whole agent run, a herd of $HERD_AGENTS within $HERD_WINDOW (its second round) | $(fmt "$herd_run_ms" %.2f) ms | $(verdict "$herd_run_ms" 1.5 '<=') |"
    echo "| the same herd against bench/tlsfloor (TLS and HTTP alone, no farm work): broker ÷ floor ≤ 1.5 | $(fmt "$floor_run_ms" %.2f) ms; $(fmt "$floor_ratio" %.2f)× | $(verdict "$floor_ratio" 1.5 '<=') |"
    echo "| ≤ 250 µs of broker CPU for a catalog request with fresh facts (herd environment, 16 clients) | $(fmt "$herd_fresh_us" %.0f) µs | $(verdict "$herd_fresh_us" 250 '<=') |"
  fi
  if awk -v m="$others_max" 'BEGIN { exit !(m > 0.25) }'; then
    echo
    echo "Other processes on this machine took up to $others_max of its $ncpu CPUs during some runs (last"
    echo "column of the tables): those runs are slower and their tails longer than on a quiet machine."
  fi
  echo
  echo "## Catalog requests over keep-alive"
  echo
  echo "Each client is one agent on its own keep-alive TLS connection (client i is node i mod $NODES),"
  echo "looping \`POST /puppet/v3/catalog/NAME?environment=production\` with the recorded agent's"
  echo "27 KB form body (~120 facts URL-encoded twice, names rewritten per node) and the agent's"
  echo "headers; every answer is read whole, and a sample is gunzipped and checked."
  echo "*same*: each upload repeats the node's previous facts byte for byte (the broker's fast path)."
  echo "*fresh*: each upload carries a new facts timestamp, as every real agent run does, so the"
  echo "broker decodes, digests and stores the facts each time (no compile: nothing relevant changed)."
  echo "Every node's catalog is compiled before measuring (warm-up): these runs measure serving"
  echo "stored catalogs."
  echo
  cat "$work/catalog.md"
  echo
  echo "## New agent connections"
  echo
  echo "Each request opens a new TCP + TLS connection presenting the node's client certificate"
  echo "(ECDSA P-256 key, no session resumption, the key exchange groups of puppet agent 7's"
  echo "OpenSSL 3.0), sends \`GET /status/v1/simple\` with \`Connection: close\`, reads the answer"
  echo "and closes."
  echo
  cat "$work/conns.md"
  echo
  echo "## Compiles per 1,000 fact uploads"
  echo
  echo "A synthetic fleet uploads facts (\`PUT /puppet/v3/facts\`) round robin after a baseline"
  echo "upload: every upload changes volatile facts (uptime, free memory, load) and a"
  echo "non-volatile fact no manifest reads; 1% of uploads (deterministic) also change"
  echo "\`networking.fqdn\`, which the benchmark manifests read. Target: 0 compiles for the"
  echo "first kind, one per changed used fact for the second. Compiles come from the broker's"
  echo "metrics after the queue drained."
  echo
  cat "$work/churn.md"
  echo
  echo "## Whole agent runs"
  echo
  echo "What users live with: $AGENTS simulated Puppet 7 agents (bench/agentsim), each with its own"
  echo "certificate, run once within $AGENT_WINDOW against the benchmark broker: a new mTLS connection,"
  echo "pluginsync (file_metadatas), the catalog request with fresh facts (volatile facts changed,"
  echo "nothing else), and a report of real size. A warm-up round first compiled every agent's"
  echo "catalog; the measured round should compile nothing. Broker CPU is its process's user+system"
  echo "time (/proc) over the round, divided by runs (compile workers counted apart)."
  echo
  if [ -s "$work/agents.md" ]; then
    cat "$work/agents.md"
  else
    echo "**agentsim failed (exit $agents_rc) before it measured anything**: see the output of \`make bench\`."
  fi
  echo
  echo '```'
  echo "${agents_cmd[*]}" | sed "s#$work/agentsim#agentsim#g; s#--broker-pid [^ ]*#--broker-pid PID#" | nocmd
  echo '```'
  echo
  if [ "$HERD_AGENTS" -gt 0 ]; then
    echo "## A herd of $HERD_AGENTS agents"
    echo
    echo "$HERD_AGENTS simulated agents (as above: each run a new mTLS connection, pluginsync, the catalog"
    echo "with fresh volatile facts, a report sized to the catalog: ~50 KB here) start their runs evenly within $HERD_WINDOW, twice, against"
    echo "a broker on the herd environment (bench/herd: the benchmark environment with fewer of each thing, a 37 KB catalog, so"
    echo "that every agent's one-time first compile, kept in \`$HERD_DIR\`, takes minutes). A 503 is"
    echo "retried after its Retry-After, as Puppet 7 does. Targets: every run within the window,"
    echo "0 failed runs, 0 compiles; broker CPU ≤ 1.5 ms per run and ≤ 250 µs per catalog request."
    echo "On 2 cores the simulator's own CPU (its column) shares the machine with the broker."
    echo
    if [ -s "$work/herd.md" ]; then
      cat "$work/herd.md"
    else
      echo "**the big herd failed (exit $herd_rc) before it measured anything**: see the output of \`make bench\`."
    fi
    echo
    echo '```'
    echo "${herd_broker_cmd[*]}" | sed "s#$work/#\$TMP/#g" | nocmd
    echo "${herd_warm_cmd[*]}   # once per BENCH_HERD_DIR" | sed "s#$work/agentsim#agentsim#g; s#--broker-pid [^ ]*#--broker-pid PID#" | nocmd
    echo "${herd_cmd[*]}" | sed "s#$work/agentsim#agentsim#g; s#--broker-pid [^ ]*#--broker-pid PID#" | nocmd
    echo '```'
    echo
    echo "### A catalog request with fresh facts"
    echo
    echo "The same broker and environment, its catalog requests alone: 16 clients over keep-alive, each"
    echo "request with fresh volatile facts as in an agent run (the ≤ 250 µs target is the broker CPU per"
    echo "request here; the herd's \"per catalog request\" column above is its CPU per run, one catalog each)."
    echo
    if [ -s "$work/herd-catalog.md" ]; then
      cat "$work/herd-catalog.md"
    else
      echo "**this run failed (exit $herd_rc) before it measured anything**: see the output of \`make bench\`."
    fi
    echo
    echo '```'
    echo "${herd_cat_cmd[*]}" | nocmd
    echo '```'
    echo
    echo "### The floor: the same herd with no farm work"
    echo
    echo "bench/tlsfloor serves the same herd with the front door's TLS set-up (pkg/ca's"
    echo "ServerTLSConfig on the herd's CA: the same handshake, client certificate check and"
    echo "revocation look-up) and the same net/http server, and does nothing else: every node gets the"
    echo "catalog the broker served one agent (captured just before, gzipped once per node in round 1),"
    echo "every pluginsync request the broker's answer, every report is read and answered \`[\"store\"]\`."
    echo "Its CPU per run is what Go's TLS, HTTP and runtime cost for this traffic on this machine: no"
    echo "front door written with them takes less. Round 2 is the one to compare with the broker's."
    echo
    if [ -s "$work/floor.md" ]; then
      cat "$work/floor.md"
    else
      echo "**the floor run failed (exit $herd_rc) before it measured anything**: see the output of \`make bench\`."
    fi
    echo
    echo '```'
    echo "${floor_cap_cmd[*]}" | sed "s#$work/tlsfloor#tlsfloor#g; s#$work#\$TMP#g; s#--from [^ ]*#--from 127.0.0.1:PORT#"
    echo "${floor_cmd[*]}" | sed "s#$work/tlsfloor#tlsfloor#g; s#$work#\$TMP#g"
    echo "${floor_herd_cmd[*]}" | sed "s#$work/agentsim#agentsim#g; s#--broker-pid [^ ]*#--broker-pid PID#" | nocmd
    echo '```'
    echo
  fi
  if [ "$PCP_CONNS" -gt 0 ]; then
    if [ -s "$work/pcp.md" ]; then
      sed "s#$work/#\$TMP/#g" "$work/pcp.md"
    else
      echo "## PCP broker: $PCP_CONNS connections"
      echo
      echo "**pcpbench failed (exit $pcp_rc) before it measured anything**: see the output of \`make bench\`."
    fi
    echo
  fi
  echo "## Compiles per 1,000 check-ins on real modules"
  echo
  echo "The corpus of real Puppet code (internal/corpus, testdata/corpus/README.md): a"
  echo "roles-and-profiles environment over Debian's puppet modules (apache, mysql, postgresql,"
  echo "haproxy, memcached, redis, chrony, collectd, rsyslog, ssh, ...) and its nodes' facts, derived"
  echo "from a real Puppet 7 agent's upload. A second broker serves it; $CORPUS_NODES synthetic nodes (node"
  echo "i takes corpus node i's facts and role, modulo the corpus's nodes, under its own certname)"
  echo "upload their facts once (the baseline: first compiles), then check in (\`PUT /puppet/v3/facts\`)"
  echo "$CORPUS_UPLOADS times round robin. Every check-in changes the volatile facts as the node's"
  echo "next agent run would (memory used and available, load averages, mountpoint usage, uptime:"
  echo "\`corpus.Churn\`); 1% of check-ins (deterministic) also change a fact the node's role really"
  echo "reads (\`corpus.UsedChange\`: \`processors.count\` for app, \`memorysize\` for cache,"
  echo "\`networking.ip\` for the load balancers, ...), alternately to a new value and back. A node"
  echo "checks in again after such a change only once its compile has run, as an agent half an hour"
  echo "later would. **Target: one compile per used-fact change, nothing more** (extra compiles 0)."
  echo "Compiles come from the broker's metrics after the queue drained; a failed compile fails"
  echo "\`make bench\`."
  echo
  if [ -s "$work/corpus.md" ]; then
    cat "$work/corpus.md"
  else
    echo "**The corpus phase failed (exit $corpus_rc) before it measured anything**: see the output of \`make bench\`."
  fi
  echo
  echo '```'
  echo "${build_cmd[*]}" | nocmd
  echo "${corpus_broker_cmd[*]}" | nocmd
  echo "${corpus_cmd[*]}" | nocmd
  echo '```'
  echo
  if [ "$scale_run" = 1 ] && [ -s "$work/scale.md" ]; then
    cat "$work/scale.md"
    if [ "$scale_rc" -ne 0 ]; then
      echo
      echo "**scalebench failed (exit $scale_rc)**: the tables above hold what it measured before; see the output of \`make bench\`."
    fi
  elif [ "$scale_run" = 1 ]; then
    echo "## Scale"
    echo
    echo "**scalebench failed (exit $scale_rc) before it measured anything**: see the output of \`make bench\`."
  else
    echo "## Scale"
    echo
    echo "Not run: BENCH_SCALE_SIZES, BENCH_SCALE_AWS_SIZES and BENCH_SCALE_EXPORT_SIZES were empty."
  fi
  echo
  if [ "$PDB_AGENTS" -gt 0 ]; then
    if [ -s "$work/pdb.md" ]; then
      sed "s#$work/#\$TMP/#g" "$work/pdb.md"
    else
      echo "## PuppetDB: commands, delivery, queries"
      echo
      echo "**pdbbench failed (exit $pdb_rc) before it measured anything**: see the output of \`make bench\`."
    fi
    echo
  fi
  echo "## Compile time"
  echo
  if [ -n "$compiles" ]; then
    echo "- The benchmark catalog through the farm: $compiles first compiles during the warm-up, mean"
    echo "  ${compile_mean}s${compile_p50:+, median $(awk -v m="$compile_p50" 'BEGIN {printf "%.2f", m/1000}')s} ($WORKERS workers compiling at once; the first compile on each"
    echo "  worker also loads the environment). From the broker's metrics and operator API."
  fi
  if [ "$compile_out" = "FAILED" ]; then
    echo "- \`BenchmarkCompileWarm\` failed in this run; run \`${bench_cmd[*]}\` to see why."
  elif [ -n "$compile_out" ]; then
    echo "- \`BenchmarkCompileWarm\` (the small example environment, examples/environments, one warm worker):"
    echo
    echo '```'
    printf '%s\n' "$compile_out" | grep -E '^Benchmark'
    echo '```'
  else
    echo "- \`BenchmarkCompileWarm\` does not exist in pkg/compiler/puppet yet: not measured."
  fi
  echo
  echo "## Certificate signing"
  echo
  if [ "$ca_out" = "FAILED" ]; then
    echo "- The CA benchmarks failed in this run; run \`$(printf '%q ' "${ca_cmd[@]}" | sed 's/ $//')\` to see why."
  else
    echo "Autosigned certificate requests with a 4096-bit CA key: \`BenchmarkSign\` on the CA"
    echo "directory (fsync per write), \`BenchmarkSignDynamoDB\` on the DynamoDB CA store against"
    echo "dynalite on loopback, one CA at a time and through two CAs on one table in parallel (two"
    echo "front doors). \`$(printf '%q ' "${ca_cmd[@]}" | sed 's/ $//')\`:"
    echo
    echo '```'
    printf '%s\n' "$ca_out" | grep -E '^Benchmark' | awk '{printf "%s  %.0f certificates/s\n", $0, 1e9/$3}'
    echo '```'
  fi
  echo
  echo "## The front door's hot paths"
  echo
  if [ "$hot_out" = "FAILED" ]; then
    echo "- The front door benchmarks failed in this run; run \`$(printf '%q ' "${hot_cmd[@]}" | sed 's/ $//')\` to see why."
  else
    echo "The handlers of a steady-state agent run, in process and without TLS: the report PUT's"
    echo "summary of a 330 KB report (a scan, against encoding/json), the catalog POST with fresh facts"
    echo "(form decode, the intake's decision from the facts the catalog read), the facts form decode."
    echo "\`$(printf '%q ' "${hot_cmd[@]}" | sed 's/ $//')\`:"
    echo
    echo '```'
    printf '%s\n' "$hot_out" | grep -E '^Benchmark'
    echo '```'
  fi
  echo
  echo "## External node classifier"
  echo
  if [ "$enc_out" = "FAILED" ]; then
    echo "- The classifier benchmark failed in this run; run \`$(printf '%q ' "${enc_cmd[@]}" | sed 's/ $//')\` to see why."
  else
    echo "What \`--external-nodes\` adds to each check-in besides the classifier's own work (it runs"
    echo "once per agent run with nothing changed: on the catalog request): one fork, exec and"
    echo "YAML parse of a shell-script classifier that answers at once."
    echo "\`$(printf '%q ' "${enc_cmd[@]}" | sed 's/ $//')\`:"
    echo
    echo '```'
    printf '%s\n' "$enc_out" | grep -E '^Benchmark' | awk '{printf "%s  %.0f classifications/s per core\n", $0, 1e9/$3}'
    echo '```'
  fi
  echo
  echo "## How to read this"
  echo
  echo "- Latency is per request, from sending it to having read the whole answer."
  echo "- *bytes/resp* is the catalog as sent (gzip, which the agent asks for); the decoded size is"
  echo "  in the line above the table."
  echo "- Run the load generator by hand against any local broker, e.g."
  echo "  \`go run ./bench/loadgen --target 127.0.0.1:8140 --metrics http://127.0.0.1:9140/metrics\`"
  echo "  (\`--json\` for machine-readable results, \`--markdown\` for these tables, \`-h\` for the rest)."
  echo
  cat "$work/simulation.md"
} >"$OUT"
say "wrote $OUT"
corpus_per1k=$(json_num compiles_per_1000_uploads "$work/corpus.json" 2>/dev/null || true)
corpus_target=$(json_num target_per_1000_uploads "$work/corpus.json" 2>/dev/null || true)
say "16 clients: $(fmt "$rps16" %.0f) catalog req/s, p99 $(fmt "$p99_16" %.1f) ms (fresh facts: $(fmt "$fresh16" %.0f) req/s); new connections: $(fmt "$conn_rps" %.0f)/s; other processes took up to $others_max CPUs"
say "corpus: ${corpus_per1k:-?} compiles per 1,000 check-ins (target ${corpus_target:-?})"
if [ "$corpus_rc" -ne 0 ]; then
  say "the corpus phase FAILED (exit $corpus_rc): see its output above (failed compiles are in $OUT too)"
  exit "$corpus_rc"
fi
if [ "$herd_rc" -ne 0 ]; then
  say "the big herd FAILED (exit $herd_rc): see its output above"
  exit "$herd_rc"
fi
if [ "$pcp_rc" -ne 0 ]; then
  say "the PCP broker benchmark FAILED (exit $pcp_rc): see its output above and its section in $OUT"
  exit "$pcp_rc"
fi
if [ "$scale_rc" -ne 0 ]; then
  say "scalebench FAILED (exit $scale_rc): see its output above ($OUT holds what it measured before)"
  exit "$scale_rc"
fi
if [ "$pdb_rc" -ne 0 ]; then
  say "pdbbench FAILED (exit $pdb_rc): see its output above ($OUT holds what it measured before)"
  exit "$pdb_rc"
fi
if [ "$sim_rc" -ne 0 ]; then
  say "the queue-age scaling simulation FAILED (exit $sim_rc): see its section in $OUT"
  exit "$sim_rc"
fi
