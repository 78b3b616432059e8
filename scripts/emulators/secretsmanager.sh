#!/usr/bin/env bash
# Checks that the Secrets Manager emulator pkg/cakey's tests run against is
# here: moto's server mode (Apache-2.0), `python3 -m moto.server -H
# 127.0.0.1 -p PORT`. moto is not packaged by Debian and PyPI is not
# reachable from CI, so this script cannot download it: it installs what
# Debian has (flask, flask-cors, which moto's server needs) when root, and
# fails, saying what to do, when moto itself is missing. The machine images
# compilefarm's CI runs on have moto 5.2.1 installed with pip.
#
# Why moto: no Secrets Manager emulator installs from the Go module proxy
# or npm, and LocalStack (which embeds moto for this service) needs Docker.
set -euo pipefail

want=5
py="${PYTHON:-python3}"
say() { echo "emulators/secretsmanager: $*"; }
die() { echo "emulators/secretsmanager: ERROR: $*" >&2; exit 1; }

command -v "$py" >/dev/null 2>&1 || die "$py is not installed (Debian: apt-get install python3)"
version="$("$py" -c 'import moto; print(moto.__version__)' 2>/dev/null || true)"
[ -n "$version" ] || die "moto is not installed for $py; install it with: $py -m pip install 'moto[server]==5.2.1' (PyPI), or point PYTHON at an interpreter that has it"
[ "${version%%.*}" -ge "$want" ] || die "moto $version is too old (need $want.x): $py -m pip install 'moto[server]==5.2.1'"

if ! "$py" -c 'import flask, flask_cors' 2>/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		say "installing python3-flask and python3-flask-cors (moto's server mode needs them)..."
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-flask python3-flask-cors >/dev/null \
			|| die "apt-get install python3-flask python3-flask-cors failed"
	fi
	"$py" -c 'import flask, flask_cors' 2>/dev/null \
		|| die "moto's server mode needs flask and flask-cors for $py: $py -m pip install 'moto[server]==5.2.1'"
fi
say "moto $version is installed for $py"
