#!/usr/bin/env bash
# Installs what compilefarm needs to run (`make run`) and to test (`make test`)
# on Debian 12: Debian's puppet-agent (Ruby Puppet 7, the compile engine and
# the real agent the end-to-end tests drive), openssl (CA tests), hiera-eyaml
# (encrypted Hiera data: eyaml_lookup_key levels and the eyaml tool), and real
# Puppet modules from Debian (puppet-module-*, under /usr/share/puppet/modules):
# the ones the puppet engine's fact-read mutation test compiles, and the ones
# the Puppet corpus (testdata/corpus, internal/corpus) builds its roles on.
# As root it installs with apt-get; otherwise it fails, saying what to install.
set -euo pipefail

need_pkgs=()
command -v go >/dev/null 2>&1 || { echo "install-deps: Go 1.24+ is required; install it and put it on PATH" >&2; exit 1; }
command -v puppet >/dev/null 2>&1 && ruby -rpuppet -e 'exit 0' >/dev/null 2>&1 || need_pkgs+=(puppet-agent)
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
command -v hostname >/dev/null 2>&1 || need_pkgs+=(hostname)
{ command -v eyaml >/dev/null 2>&1 && ruby -e 'require "hiera/backend/eyaml"' >/dev/null 2>&1; } || need_pkgs+=(hiera-eyaml)
# Module directory under /usr/share/puppet/modules => Debian package.
# (saz-rsyslog's directory is named after the package; its module is rsyslog.)
for mod in stdlib:puppetlabs-stdlib ntp:puppetlabs-ntp apache:puppetlabs-apache concat:puppetlabs-concat \
  apt:puppetlabs-apt mysql:puppetlabs-mysql inifile:puppetlabs-inifile translate:puppetlabs-translate \
  cron_core:puppetlabs-cron-core \
  ssh:saz-ssh logrotate:rodjek-logrotate saz-rsyslog:saz-rsyslog sshkeys_core:puppetlabs-sshkeys-core \
  host_core:puppetlabs-host-core postgresql:puppetlabs-postgresql haproxy:puppetlabs-haproxy \
  memcached:saz-memcached redis:arioch-redis firewall:puppetlabs-firewall rsync:puppetlabs-rsync \
  xinetd:puppetlabs-xinetd chrony:aboe-chrony collectd:voxpupuli-collectd; do
  [ -d "/usr/share/puppet/modules/${mod%%:*}/manifests" ] || [ -d "/usr/share/puppet/modules/${mod%%:*}/lib" ] ||
    need_pkgs+=("puppet-module-${mod#*:}")
done

if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${need_pkgs[*]}" >&2
    echo "install-deps: run as root, or: sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${need_pkgs[*]} with apt-get (one-time, ~1 minute)..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

v=$(puppet --version 2>/dev/null || true)
case "$v" in
  7.*) ;;
  *) echo "install-deps: puppet 7 is required, found '${v:-none}'" >&2; exit 1 ;;
esac
for d in stdlib ntp apache concat apt mysql inifile translate cron_core \
  ssh logrotate saz-rsyslog sshkeys_core host_core postgresql haproxy memcached redis firewall rsync \
  xinetd chrony collectd; do
  [ -d "/usr/share/puppet/modules/$d" ] || { echo "install-deps: puppet module $d is missing from /usr/share/puppet/modules" >&2; exit 1; }
done
eyaml_v=$(ruby -e 'require "hiera/backend/eyaml"; require "hiera/backend/eyaml/encryptors/pkcs7"; print Hiera::Backend::Eyaml::VERSION' 2>&1) ||
  { echo "install-deps: hiera-eyaml does not load in ruby: $eyaml_v (Debian: apt-get install hiera-eyaml)" >&2; exit 1; }
command -v eyaml >/dev/null 2>&1 || { echo "install-deps: the eyaml command is missing (Debian: apt-get install hiera-eyaml)" >&2; exit 1; }
echo "install-deps: hiera-eyaml $eyaml_v"
echo "install-deps: ok (go $(go env GOVERSION), puppet $v, $(openssl version | cut -d' ' -f1-2), puppet modules from Debian)"
