#!/usr/bin/env bash
# Installs the AWS CDK CLI the infra/ app is tested with into .tools/cdk/
# (project-local, pinned; idempotent: does nothing when it is there), and with
# arguments runs it in infra/ offline-friendly:
#   scripts/cdk.sh                      # install only
#   scripts/cdk.sh synth -c stage=dev   # cd infra && cdk synth --no-notices ...
#   scripts/cdk.sh deploy -c stage=dev  # (needs AWS credentials and Docker)
# Pinned: aws-cdk 2.1148.1 (the npm `latest` tag, 3.0.0, cannot read the cloud
# assembly schema 48 that aws-cdk-lib 2.220.0 writes) and aws-cdk-local 3.0.4
# (cdklocal, for LocalStack). Needs Node 20+ and npm: fails if they are missing.
set -euo pipefail

CDK_VERSION="${CDK_VERSION:-2.1148.1}"
CDKLOCAL_VERSION="${CDKLOCAL_VERSION:-3.0.4}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/.tools/cdk"
cdk="$dir/node_modules/.bin/cdk"

say() { echo "cdk.sh: $*" >&2; }
die() { echo "cdk.sh: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || die "node is required (Node 20+) for the CDK app in infra/ (jsii runs the CDK in node); install it"
command -v npm >/dev/null 2>&1 || die "npm is required to install the CDK CLI; install it"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 20 ] || die "Node 20+ is required, found $(node --version)"

version_of() {
  local f="$dir/node_modules/$1/package.json"
  [ -f "$f" ] && node -p "require('$f').version" 2>/dev/null || true
}
if [ "$(version_of aws-cdk)" != "$CDK_VERSION" ] || [ "$(version_of aws-cdk-local)" != "$CDKLOCAL_VERSION" ] || [ ! -x "$cdk" ]; then
  say "installing aws-cdk@$CDK_VERSION aws-cdk-local@$CDKLOCAL_VERSION into $dir (one-time)..."
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] ||
    printf '{\n  "name": "compilefarm-cdk-cli",\n  "private": true,\n  "description": "the AWS CDK CLI for infra/ (scripts/cdk.sh)"\n}\n' >"$dir/package.json"
  npm install --prefix "$dir" --cache "$root/.tools/npm-cache" --no-audit --no-fund --loglevel=error \
    "aws-cdk@$CDK_VERSION" "aws-cdk-local@$CDKLOCAL_VERSION" || die "npm install of the CDK CLI failed (see above)"
  [ "$(version_of aws-cdk)" = "$CDK_VERSION" ] || die "expected aws-cdk $CDK_VERSION in $dir, got '$(version_of aws-cdk)'"
fi

[ $# -eq 0 ] && exit 0

# No notices, telemetry or version checks (no network for synth); the
# CLI's cache stays under .tools; node 20 is past jsii's support window,
# which is fine here: silence its banner.
export CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=1 CDK_HOME="$root/.tools/cdk-home"
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="${JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION:-20}"
export GOWORK=off
cd "$root/infra"
exec "$cdk" "$@" --no-notices
