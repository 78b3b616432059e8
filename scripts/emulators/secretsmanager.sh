#!/usr/bin/env bash
# Installs the Secrets Manager emulator pkg/cakey's tests and the e2e tests
# run against: moto's server mode (Apache-2.0), from Debian's python3-moto
# package, into .tools/moto/ in the module root, for Debian's own
# /usr/bin/python3. internal/emulator starts it as
#   PYTHONPATH=.tools/moto/lib /usr/bin/python3 -s -m moto.server -H 127.0.0.1 -p PORT
#
# PyPI is not reachable from CI, and python3-moto is in Debian 13 (trixie)
# but not in 12 (bookworm). It is pure Python (Architecture: all) and its
# dependencies are all in bookworm, so this script fetches the pinned trixie
# .deb with apt-get download, checks its SHA-256, and unpacks it with
# dpkg-deb -x (nothing is installed into the system). The dependencies are
# installed with apt-get when root; otherwise it fails, saying what to
# install. python3-antlr4, also in python3-moto's Depends, is left out: only
# moto's Step Functions parser imports it.
#
# Where trixie comes from: the machine's own Debian mirror, the one its apt
# sources use for this release's main suite (apt-get indextargets), or
# DEBIAN_MIRROR when set. apt-get runs with a private configuration file
# layered on the machine's (so its proxy and other Acquire settings hold):
# its own sources list (just "<mirror> trixie main", Packages only), its own
# state and cache directories in a temporary directory, and no update hooks;
# the system's sources, lists and cache are not touched. apt verifies the
# trixie InRelease with the Debian archive keyring (bookworm's keyring
# verifies it: trixie's InRelease is also signed with the 12/bookworm
# archive key), and the .deb against the signed Packages index; the pinned
# SHA-256 below is checked on top of that.
#
# Idempotent: when the pinned version is unpacked and its dependencies are
# installed it downloads nothing and takes about a second.
#
# Why moto: no Secrets Manager emulator installs from the Go module proxy
# or npm, and LocalStack (which embeds moto for this service) needs Docker.
#
# To move to another python3-moto: when the pinned version leaves trixie
# this script fails and prints the versions trixie has, with their SHA256;
# put the new one in deb_version and deb_sha256 below.
set -euo pipefail

suite=trixie
deb_version="5.1.1-4"
deb_sha256="8a231ec9c330cd2cf40fde0d0ebe1d3c10698cfba718cee8a2ad7e983c4e7574"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
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

# os_codename prints this machine's Debian release codename (bookworm).
os_codename() {
	(. /etc/os-release && echo "${VERSION_CODENAME:-}")
}

# debian_mirror prints the first mirror URL apt's sources use for this
# release's main suite (the part before /dists/), or nothing.
debian_mirror() {
	local codename
	codename="$(os_codename)"
	[ -n "$codename" ] || return 0
	{
		apt-get indextargets --format '$(REPO_URI)' "Release: $codename" 'Component: main' 'Target-Of: deb' 2>/dev/null
		# Sources that name the suite (stable, oldstable) rather than the
		# codename match by the codename their Release file gives.
		apt-get indextargets --format '$(REPO_URI)' "Codename: $codename" 'Component: main' 'Target-Of: deb' 2>/dev/null
	} | awk 'NF { print; exit }'
}

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
command -v apt-get >/dev/null 2>&1 || die "apt-get is needed to fetch python3-moto from Debian $suite"
[ -r "$keyring" ] || die "$keyring is missing: apt-get install debian-archive-keyring"
mirror="${DEBIAN_MIRROR:-$(debian_mirror)}"
[ -n "$mirror" ] ||
	die "found no Debian mirror for the main suite of '$(os_codename)' in apt's sources (apt-get indextargets); set DEBIAN_MIRROR to the URL of a Debian mirror that has $suite (the part before /dists/)"
mirror="${mirror%/}"
tmp="$(mktemp -d "$dir/.install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# A private apt: its own sources, state and cache under $tmp, layered (-c)
# on the machine's configuration. Update hooks are cleared: they are the
# system's (appstream, packagekit, ...) and would act on the system's lists.
apt="$tmp/apt"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/empty" "$tmp/deb"
echo "deb [arch=$(dpkg --print-architecture) lang=none target=Packages signed-by=$keyring] $mirror $suite main" >"$apt/sources.list"
cat >"$apt/apt.conf" <<EOF
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "$apt/empty";
Dir::Etc::Preferences "$apt/empty/preferences";
Dir::Etc::PreferencesParts "$apt/empty";
Dir::State "$apt";
Dir::State::Lists "$apt/lists";
Dir::Cache "$apt/cache";
#clear APT::Update::Pre-Invoke;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
EOF
# As root, apt downloads as the unprivileged _apt user: let it write here.
if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
	chmod 755 "$tmp"
	chown _apt "$tmp/deb"
fi

say "fetching $suite's package index from $mirror (about 10 MB, signature checked with $keyring)..."
apt-get -c "$apt/apt.conf" -qq --error-on=any update ||
	die "apt-get update of '$mirror $suite main' failed (see above). The machine must reach that mirror with apt's configuration and the mirror must carry $suite (or set DEBIAN_MIRROR to a Debian mirror that does); on a GPG error, $keyring cannot verify $suite: upgrade debian-archive-keyring"
say "downloading python3-moto $deb_version (3.5 MB) with apt-get..."
if ! (cd "$tmp/deb" && apt-get -c "$apt/apt.conf" -qq download "python3-moto=$deb_version"); then
	have="$({ apt-cache -c "$apt/apt.conf" show python3-moto 2>/dev/null || true; } | awk '$1 == "Version:" || $1 == "SHA256:" { printf "%s%s %s", sep, $1, $2; sep = ", " }')"
	die "apt-get download python3-moto=$deb_version from '$mirror $suite main' failed (see above). $suite has: ${have:-no python3-moto}; if $deb_version is gone, check the new version and put it in deb_version and deb_sha256 in $0"
fi
deb="$(find "$tmp/deb" -name 'python3-moto_*.deb' -print -quit)"
[ -n "$deb" ] || die "apt-get download reported success but left no python3-moto .deb in $tmp/deb"
got="$(sha256sum "$deb" | cut -d' ' -f1)"
[ "$got" = "$deb_sha256" ] ||
	die "python3-moto $deb_version from $mirror has SHA-256 $got, but $0 pins $deb_sha256: not using it. apt checked it against $suite's signed index, so Debian rebuilt it: check the new package and update deb_sha256"

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
