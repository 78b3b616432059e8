#!/usr/bin/env bash
# Runs the Go build stage of each image's Dockerfile on this machine, for
# the platform the stack deploys (linux/arm64), into a throwaway directory:
# so a change that does not build for the images fails `make synth`, not a
# `cdk deploy` (the images themselves need Docker; infra/README.md says
# what is checked where).
#   scripts/cross-compile.sh                      # both images
#   scripts/cross-compile.sh broker/Dockerfile    # one
# Each `RUN ... go build ...` line of a Dockerfile is run as Docker's RUN
# would (sh -c, in the repository root, which `COPY . .` copies), with the
# build arguments BuildKit sets for --platform linux/arm64 (TARGETOS,
# TARGETARCH) and the output directory /out/ moved into the throwaway one.
# GO names the go command (default go).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"

die() { echo "cross-compile.sh: $*" >&2; exit 1; }

[ $# -gt 0 ] || set -- broker/Dockerfile functions/compile/Dockerfile
out="$(mktemp -d "${TMPDIR:-/tmp}/cross-compile.XXXXXX")"
trap 'rm -rf "$out"' EXIT

export TARGETOS=linux TARGETARCH=arm64 TARGETPLATFORM=linux/arm64
export GOWORK=off
# `go` in the Dockerfile's commands is $GO here.
go() { command "$GO" "$@"; }

for df in "$@"; do
  [ -f "$df" ] || die "no Dockerfile $df"
  builds=0
  # A RUN line may continue over several lines (a trailing backslash).
  while IFS= read -r cmd; do
    case "$cmd" in
      *" go build "*) ;;
      *) continue ;;
    esac
    cmd="${cmd#RUN }"
    cmd="${cmd//\/out\//$out/}"
    echo "cross-compile.sh: $df: $cmd" >&2
    (eval "$cmd") || die "$df: the image's Go build fails for linux/arm64: $cmd"
    builds=$((builds + 1))
  done < <(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$df" | grep -E '^RUN ')
  [ "$builds" -gt 0 ] || die "$df has no RUN ... go build line"
done
ls -l "$out" >&2
