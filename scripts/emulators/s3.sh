#!/usr/bin/env bash
# Installs the S3 emulator the pkg/s3store tests run against: versitygw
# (Apache-2.0), built from the Go module proxy into .tools/ at the module root.
# Idempotent: does nothing when .tools/versitygw exists and was built from the
# pinned version. The first build takes about 3 minutes.
#
#   scripts/emulators/s3.sh          # install (or check) versitygw
#   VERSITYGW_VERSION=v1.8.0 scripts/emulators/s3.sh
set -euo pipefail

version="${VERSITYGW_VERSION:-v1.8.0}"
module="github.com/versity/versitygw"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tools="$root/.tools"
bin="$tools/versitygw"

say() { echo "emulators/s3: $*"; }
die() { echo "emulators/s3: error: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is required to build versitygw; install Go 1.24+ and put it on PATH"

# `versitygw --version` says "git" for a `go install` build (the release
# version is set by its Makefile's ldflags), hence the build info.
# installed_version prints the main module version recorded in the binary's
# build info ("go version -m"), or nothing.
installed_version() {
  { go version -m "$1" 2>/dev/null || true; } | awk '$1 == "mod" && $2 == "'"$module"'" { print $3; exit }'
}

if [ -x "$bin" ]; then
  have="$(installed_version "$bin")"
  if [ "$have" = "$version" ]; then
    say "versitygw $version already installed at $bin"
    exit 0
  fi
  say "found $bin built from '${have:-unknown version}', want $version: rebuilding"
fi

mkdir -p "$tools"
say "building versitygw $version into $tools (one-time, about 3 minutes)..."
start=$(date +%s)
# Build into a temporary GOBIN and move into place, so an interrupted build
# never leaves a half-written binary where the tests look for it.
tmp="$(mktemp -d "$tools/.versitygw-build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "$module/cmd/versitygw@$version"; then
  die "go install $module/cmd/versitygw@$version failed (see above); check network access to the Go module proxy"
fi
[ -x "$tmp/versitygw" ] || die "go install reported success but $tmp/versitygw is missing"
have="$(installed_version "$tmp/versitygw")"
[ "$have" = "$version" ] || die "built binary reports module version '${have:-none}', want $version"
mv -f "$tmp/versitygw" "$bin"
say "installed versitygw $version at $bin in $(( $(date +%s) - start ))s"
