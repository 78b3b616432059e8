#!/usr/bin/env bash
# make puppetdb-reference: issue 22's side-by-side test with a real Puppet
# Server 7 (test/puppetdbref's TestSideBySide): the same agent runs go
# through Debian's puppetserver with the puppetdb termini and through the
# farm, and what PuppetDB then holds for the two nodes is compared. It also
# re-records Puppet Server's side in test/puppetdbref/testdata/puppetserver.json,
# which make test compares the farm with (TestFarmMatchesRecording): commit
# that file when it changes (git diff shows how).
#
# It uses the PuppetDB COMPILEFARM_PUPPETDB_DIR names (make puppetdb starts
# one), or starts one of its own for the run and stops it after. Puppet
# Server is a second JVM: about a minute and 650 MB to start on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

if [ -z "${COMPILEFARM_PUPPETDB_DIR:-}" ]; then
	dir=$(mktemp -d "${TMPDIR:-/tmp}/compilefarm-puppetdb.XXXXXX")
	trap 'scripts/puppetdb.sh stop "$dir" || true; rm -rf "$dir"' EXIT
	GO=$GO scripts/puppetdb.sh start "$dir"
	export COMPILEFARM_PUPPETDB_DIR=$dir
fi
$GO test -tags puppetserver -count=1 -v -timeout 20m ./test/puppetdbref/ -run '^TestSideBySide$' -record
