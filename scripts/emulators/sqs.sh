#!/usr/bin/env bash
# Installs fauxqs (MIT, npm), the SQS emulator pkg/sqsqueue's tests run
# against, into .tools/fauxqs/ in the module root. Idempotent: does nothing
# when the pinned version is already there. Needs Node 20+ and npm; fauxqs
# 1.9.x is the last line that runs on Node 20 (2.x needs Node >= 22.5).
#
# The tests start it as
#   FAUXQS_PORT=PORT node --require scripts/emulators/loopback.js \
#     .tools/fauxqs/node_modules/fauxqs/dist/cli.js
# (loopback.js forces the listener onto 127.0.0.1; fauxqs binds 0.0.0.0).
set -euo pipefail

version="${FAUXQS_VERSION:-1.9.x}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$root/.tools/fauxqs"
cli="$dir/node_modules/fauxqs/dist/cli.js"

say() { echo "emulators/sqs: $*"; }
die() { echo "emulators/sqs: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || die "node is required (Node 20+); install nodejs"
command -v npm >/dev/null 2>&1 || die "npm is required; install npm"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 20 ] || die "Node 20+ is required, found $(node --version)"

installed=""
if [ -f "$dir/node_modules/fauxqs/package.json" ]; then
  installed="$(node -p "require('$dir/node_modules/fauxqs/package.json').version" 2>/dev/null || true)"
fi
case "$installed" in
  1.9.*)
    if [ -f "$cli" ] && [ "${version}" = "1.9.x" ]; then
      say "fauxqs $installed already installed in $dir"
      exit 0
    fi
    ;;
esac

say "installing fauxqs@$version into $dir (one-time, about 10 seconds)..."
mkdir -p "$dir"
if [ ! -f "$dir/package.json" ]; then
  printf '{\n  "name": "compilefarm-sqs-emulator",\n  "private": true,\n  "description": "fauxqs for pkg/sqsqueue tests (scripts/emulators/sqs.sh)"\n}\n' >"$dir/package.json"
fi
start=$(date +%s)
if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error "fauxqs@$version"; then
  die "npm install fauxqs@$version failed (see above)"
fi
[ -f "$cli" ] || die "fauxqs installed but $cli is missing"
installed="$(node -p "require('$dir/node_modules/fauxqs/package.json').version")"
case "$installed" in
  1.9.*) ;;
  *) die "expected fauxqs 1.9.x, got $installed" ;;
esac
# Smoke check: the CLI loads on this Node (fails fast on a Node mismatch).
node -e "require('$dir/node_modules/fauxqs')" >/dev/null 2>&1 ||
  die "fauxqs $installed does not load on node $(node --version)"
say "fauxqs $installed installed in $(( $(date +%s) - start ))s: $cli"
