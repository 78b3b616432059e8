#!/usr/bin/env bash
# Builds the real PCP clients the PCP broker's tests run against (pxp-agent,
# the C++ agent Puppet Enterprise nodes run, and ruby-pcp-client's
# pxp-request/pcp-ping controllers) from the vendored upstream sources in
# third_party/pcp-client into .tools/pcp-client. About 3 minutes of C++ on
# 2 cores the first time (Debian packages installed with apt-get as root);
# later runs only check the binaries. Fails, saying what is missing, rather
# than letting tests skip.
#
#   scripts/pcp-clients.sh            # install (or check)
#   FORCE=1 scripts/pcp-clients.sh    # rebuild
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.tools/pcp-client"
say() { echo "pcp-clients: $*"; }
if [ -z "${FORCE:-}" ] && [ -x "$prefix/bin/pxp-agent" ] && [ -x "$prefix/bin/pxp-request" ] && [ -x "$prefix/bin/pcp-ping" ]; then
  say "ok ($prefix)"
  exit 0
fi
say "building pxp-agent and ruby-pcp-client into $prefix (one-time, about 3 minutes)..."
log="$root/.tools/pcp-client-build.log"
mkdir -p "$root/.tools"
if ! "$root/third_party/pcp-client/build.sh" "$prefix" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "pcp-clients: build failed (full log: $log); on Debian 12 as root it installs its packages itself," \
    "otherwise install those build.sh lists in APT_PKGS" >&2
  exit 1
fi
for b in pxp-agent pxp-request pcp-ping; do
  [ -x "$prefix/bin/$b" ] || { echo "pcp-clients: $prefix/bin/$b missing after the build (log: $log)" >&2; exit 1; }
done
say "ok ($prefix)"
