#!/usr/bin/env bash
# Installs the DynamoDB emulator for pkg/dynamostate's tests: dynalite (npm,
# MIT) into .tools/dynalite/ in the module root. Idempotent: does nothing
# when the pinned version is already there. Needs node and npm (Node >= 18).
#
# Why dynalite and not DynamoDB Local (AWS's jar): DynamoDB Local 1.25.1 has
# no bind-address option and ignores Jetty's host properties (checked:
# -Djetty.host=127.0.0.1 -Djetty.http.host=127.0.0.1 still listens on *:PORT),
# while dynalite takes --host 127.0.0.1. dynalite lacks transactions and TTL;
# the driver uses neither, only conditional writes, consistent reads and Scan.
#
# It has its own npm prefix (not a shared .tools/node_modules) so that other
# emulator installs, whose `npm install` prunes packages missing from their
# package.json, cannot remove it.
set -euo pipefail

VERSION=4.0.0
root=$(cd "$(dirname "$0")/../.." && pwd)
dir="$root/.tools/dynalite"
bin="$dir/node_modules/.bin/dynalite"

say() { echo "dynamodb.sh: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

if [[ -x "$bin" ]] && [[ "$(node -p "require('$dir/node_modules/dynalite/package.json').version" 2>/dev/null)" == "$VERSION" ]]; then
	say "dynalite $VERSION already installed in $dir"
	exit 0
fi

command -v node >/dev/null || die "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is not installed (Debian: apt-get install npm)"
major=$(node -p 'process.versions.node.split(".")[0]')
(( major >= 18 )) || die "dynalite $VERSION needs Node >= 18, found $(node --version)"

say "installing dynalite $VERSION into $dir (npm)..."
mkdir -p "$dir"
[[ -f "$dir/package.json" ]] || echo '{"name":"compilefarm-dynalite","private":true}' >"$dir/package.json"
start=$SECONDS
npm install --prefix "$dir" --no-audit --no-fund --save-exact "dynalite@$VERSION" >&2 \
	|| die "npm install dynalite@$VERSION failed (see above)"

[[ -x "$bin" ]] || die "npm finished but $bin is missing"
say "checking that dynalite starts..."
port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
setsid "$bin" --host 127.0.0.1 --port "$port" >"$dir/selftest.log" 2>&1 &
pid=$!
ok=
for _ in $(seq 1 50); do
	if grep -q "listening" "$dir/selftest.log" 2>/dev/null; then ok=1; break; fi
	sleep 0.1
done
kill -- -"$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[[ -n "$ok" ]] || die "dynalite did not start: $(cat "$dir/selftest.log")"
rm -f "$dir/selftest.log"
say "dynalite $VERSION installed in $dir ($((SECONDS - start)) s)"
