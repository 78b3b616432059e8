#!/usr/bin/env bash
# Installs the KMS emulator pkg/kmskey's tests run against: local-kms
# (github.com/nsmithuk/local-kms, MIT), built from the Go module proxy with
# the small command in scripts/emulators/kms (its own module, pinning
# local-kms in its go.mod and go.sum) into .tools/local-kms/local-kms at the
# module root. internal/emulator.StartKMS runs it as
#   .tools/local-kms/local-kms -listen 127.0.0.1:PORT -data DIR
#
# Why not local-kms's own main (go install ...local-kms@VERSION): it listens
# on every interface and lets two concurrent CreateAlias calls both succeed;
# the command serves local-kms's handler on loopback only, one request at a
# time, in Go's FIPS 140-3 mode (RSASSA-PSS salts as long as the digest, as
# AWS KMS makes them). Why not moto's KMS (installed for Secrets Manager):
# moto 5.1 ignores MessageType DIGEST, so its signatures of a digest do not
# verify. See scripts/emulators/kms/main.go.
#
# Idempotent: when the binary was built from the same command source (the
# SHA-256 of main.go, go.mod and go.sum, recorded beside it) it builds
# nothing. The first build takes about 30 seconds.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$root/scripts/emulators/kms"
dir="$root/.tools/local-kms"
bin="$dir/local-kms"
stamp="$dir/installed"

say() { echo "emulators/kms: $*"; }
die() { echo "emulators/kms: error: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is required to build local-kms; install Go 1.24+ and put it on PATH"

version="$(awk '$1 == "require" && $2 == "github.com/nsmithuk/local-kms" { print $3 }' "$src/go.mod")"
[ -n "$version" ] || die "$src/go.mod requires no github.com/nsmithuk/local-kms"
want_stamp="local-kms $version source sha256:$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -d' ' -f1)"

mkdir -p "$dir"
# One install at a time: make test may run in several checkouts' shells.
exec 9>"$dir/.lock"
flock 9

if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ]; then
	say "local-kms $version already installed at $bin"
	exit 0
fi

say "building local-kms $version into $dir (one-time, about 30 seconds)..."
start=$(date +%s)
# Build into a temporary directory and move into place, so an interrupted
# build never leaves a half-written binary where the tests look for it.
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
(cd "$src" && GOFLAGS=-buildvcs=false GOWORK=off go build -trimpath -o "$tmp/local-kms" .) ||
	die "go build of $src failed (see above); check network access to the Go module proxy"
[ -x "$tmp/local-kms" ] || die "go build reported success but $tmp/local-kms is missing"
have="$({ go version -m "$tmp/local-kms" || true; } | awk '$1 == "dep" && $2 == "github.com/nsmithuk/local-kms" { print $3; exit }')"
[ "$have" = "$version" ] || die "built binary has local-kms '${have:-none}', want $version"
rm -f "$stamp"
mv -f "$tmp/local-kms" "$bin"
echo "$want_stamp" >"$stamp"
say "installed local-kms $version at $bin in $(($(date +%s) - start))s"
