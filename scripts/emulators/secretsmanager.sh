#!/usr/bin/env bash
# Installs the Secrets Manager emulator pkg/cakey's tests and the e2e tests
# run against: moto's server mode (Apache-2.0), from Debian's python3-moto
# package, into .tools/moto/ in the module root, for Debian's own
# /usr/bin/python3. internal/emulator starts it as
#   PYTHONPATH=.tools/moto/lib /usr/bin/python3 -s -m moto.server -H 127.0.0.1 -p PORT
#
# PyPI is not reachable from CI, and python3-moto is in Debian 13 (trixie)
# but not in 12 (bookworm). It is pure Python (Architecture: all) and its
# dependencies are all in bookworm, so this script downloads the pinned
# trixie .deb from deb.debian.org, checks its SHA-256, and unpacks it with
# dpkg-deb -x (nothing is installed into the system). The dependencies are
# installed with apt-get when root; otherwise it fails, saying what to
# install. python3-antlr4, also in python3-moto's Depends, is left out: only
# moto's Step Functions parser imports it.
#
# Idempotent: when the pinned version is unpacked and its dependencies are
# installed it downloads nothing and takes under a second.
#
# Why moto: no Secrets Manager emulator installs from the Go module proxy
# or npm, and LocalStack (which embeds moto for this service) needs Docker.
#
# To move to another python3-moto, take the new Filename and SHA256 from
# http://deb.debian.org/debian/dists/trixie/main/binary-all/Packages.xz
# and change deb_version, deb_path and deb_sha256 below.
set -euo pipefail

deb_version="5.1.1-4"
deb_path="pool/main/p/python-moto/python3-moto_${deb_version}_all.deb"
deb_sha256="8a231ec9c330cd2cf40fde0d0ebe1d3c10698cfba718cee8a2ad7e983c4e7574"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
py=/usr/bin/python3
# What moto's server mode imports: Debian package => Python module.
deps="python3-boto3:boto3 python3-botocore:botocore python3-cryptography:cryptography
python3-dateutil:dateutil python3-flask:flask python3-flask-cors:flask_cors python3-jinja2:jinja2
python3-requests:requests python3-responses:responses python3-werkzeug:werkzeug python3-xmltodict:xmltodict"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$root/.tools/moto"
lib="$dir/lib"
stamp="$dir/installed"
want_stamp="python3-moto $deb_version sha256:$deb_sha256"

say() { echo "emulators/secretsmanager: $*"; }
die() { echo "emulators/secretsmanager: ERROR: $*" >&2; exit 1; }

# missing_pkgs prints the Debian packages moto needs that are not
# installed (python3 itself included).
missing_pkgs() {
	local d pkgs=(python3)
	for d in $deps; do pkgs+=("${d%%:*}"); done
	for p in "${pkgs[@]}"; do
		[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" = installed ] || echo "$p"
	done
}

# smoke checks that moto's server mode and its Secrets Manager backend
# import with $py from $1, and that it is the pinned version.
smoke() {
	PYTHONPATH="$1" "$py" -s -c '
import sys, moto, moto.server, moto.secretsmanager.responses
want = sys.argv[1].split("-")[0]
if moto.__version__ != want:
    sys.exit("moto %s from %s, want %s" % (moto.__version__, moto.__file__, want))
if not moto.__file__.startswith(sys.argv[2]):
    sys.exit("moto was imported from %s, not %s" % (moto.__file__, sys.argv[2]))
' "$deb_version" "$1"
}

command -v dpkg-query >/dev/null 2>&1 || die "this script needs a Debian system (dpkg-query, dpkg-deb, apt-get)"

missing="$(missing_pkgs | tr '\n' ' ')"
missing="${missing% }"
if [ -n "$missing" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		die "moto's server mode needs Debian packages that are not installed; run as root, or: sudo apt-get install -y --no-install-recommends $missing"
	fi
	say "installing $missing with apt-get (one-time, about a minute)..."
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086 # one word per package
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null \
		|| die "apt-get install $missing failed (see above)"
	missing="$(missing_pkgs | tr '\n' ' ')"
	[ -z "$missing" ] || die "apt-get reported success but these are still not installed: $missing"
fi

mkdir -p "$dir"
# One install at a time: make test may run in several checkouts' shells.
exec 9>"$dir/.lock"
flock 9

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ] && [ -d "$lib/moto" ]; then
	smoke "$lib" || die "moto $deb_version in $lib does not load with $py (see above); remove $dir and run $0 again"
	say "moto $deb_version already installed in $dir"
	exit 0
fi

command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb is needed to unpack python3-moto (Debian: apt-get install dpkg)"
url="$mirror/$deb_path"
tmp="$(mktemp -d "$dir/.install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
deb="$tmp/$(basename "$deb_path")"
start=$(date +%s)
say "downloading python3-moto $deb_version (3.5 MB) from $url..."
# Python's urllib, not curl or wget: a fresh Debian has python3 but not
# always either of those.
"$py" -c '
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
        while True:
            b = r.read(1 << 16)
            if not b:
                break
            f.write(b)
except Exception as e:
    sys.exit("emulators/secretsmanager: GET %s: %s" % (sys.argv[1], e))
' "$url" "$deb" ||
	die "download of $url failed. The machine must reach $mirror over http (or set DEBIAN_MIRROR to a Debian mirror it reaches). If the file is gone (404), trixie has a newer python3-moto: see how to move to it at the top of $0"
got="$(sha256sum "$deb" | cut -d' ' -f1)"
[ "$got" = "$deb_sha256" ] ||
	die "$url has SHA-256 $got, but $0 pins $deb_sha256: not using it. If Debian really rebuilt python3-moto $deb_version, check the SHA256 of $deb_path in $mirror/dists/trixie/main/binary-all/Packages.xz and update the pin; otherwise something between here and the mirror changed the file"

say "unpacking into $lib..."
dpkg-deb -x "$deb" "$tmp/root" || die "dpkg-deb -x $deb failed (see above)"
[ -d "$tmp/root/usr/lib/python3/dist-packages/moto" ] || die "python3-moto $deb_version has no usr/lib/python3/dist-packages/moto"
mv "$tmp/root/usr/lib/python3/dist-packages" "$tmp/lib"
smoke "$tmp/lib" || die "moto $deb_version does not load with $py and bookworm's packages (see above)"
rm -f "$stamp"
rm -rf "$lib"
mv "$tmp/lib" "$lib"
echo "$want_stamp" >"$stamp"
say "moto $deb_version installed in $dir in $(($(date +%s) - start))s"
