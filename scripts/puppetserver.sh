#!/usr/bin/env bash
# A real Puppet Server 7 (Debian's puppetserver 7.9.5) on loopback, without
# the system service: the reference the farm is compared with
# (test/puppetdbref, through internal/puppetserver).
#
#   scripts/puppetserver.sh install
#       installs (as root, with apt-get) Debian's puppetserver when missing
#       and checks that it is 7.x
#   scripts/puppetserver.sh start DIR --environments ENVS [--puppetdb URL --cadir CADIR]
#       starts Puppet Server in the background with everything of its own in
#       DIR and its environments in ENVS (its environmentpath); returns once
#       it answers `running` and DIR/env says where it is (KEY=value lines).
#       With --puppetdb it sends facts, catalogs and reports to that PuppetDB
#       through Debian's puppetdb termini (puppet-terminus-puppetdb), as a
#       site's Puppet Server does: puppetdb.conf server_urls = URL, routes.yaml
#       (facts: terminus puppetdb, cache yaml), storeconfigs = true,
#       storeconfigs_backend = puppetdb, reports = puppetdb.
#       The termini take only https URLs ("PuppetDB 'server_urls' must be
#       https"), so Puppet Server must trust PuppetDB's certificate and
#       PuppetDB Puppet Server's: --cadir CADIR (a Puppet CA directory, the
#       one PuppetDB's certificate comes from) is copied into DIR/ca and
#       Puppet Server is the CA with that key, as a site's CA is. Without
#       --cadir it generates a CA of its own.
#   scripts/puppetserver.sh stop DIR
#       stops what `start DIR` started (by the PID it recorded).
#
# What start makes in DIR: conf.d/ and services.d/ (Puppet Server's own
# configuration, from Debian's with paths and ports changed), puppet/ (its
# Puppet confdir: puppet.conf, puppetdb.conf, routes.yaml), ca/, ssl/, var/,
# code/, run/, log/ (puppetserver.log, access.log, stdout.log),
# puppetserver.pid, and env, written last (temp file + mv):
#   PUPPETSERVER_DIR, PUPPETSERVER_URL (https://127.0.0.1:PORT),
#   PUPPETSERVER_PORT, PUPPETSERVER_CACERT (the CA certificate agents trust),
#   PUPPETSERVER_CERTNAME (its own certname: the "producer" in PuppetDB).
#
# The server's certificate names localhost and 127.0.0.1, so agents reach
# it with --server localhost. Autosigning is on: a test bed.
#
# PUPPETSERVER_JAVA_ARGS (default -Xms128m -Xmx512m) sets the JVM's options,
# PUPPETSERVER_START_TIMEOUT (default 300 s) how long start waits. It runs
# one JRuby instance (max-active-instances 1): agents are served one at a
# time, which is what a 2-core test bed affords.
set -euo pipefail

PS_JAR=/usr/share/puppetserver/puppetserver.jar
PS_ETC=/etc/puppet/puppetserver
PS_RUBY=/usr/lib/puppetserver/ruby/vendor_ruby
PS_GEMS=/usr/lib/puppetserver/vendored-jruby-gems
JRUBY_LIB=/usr/share/jruby/lib
TERMINUS=/usr/lib/ruby/vendor_ruby/puppet/util/puppetdb.rb
JAVA_ARGS=${PUPPETSERVER_JAVA_ARGS:--Xms128m -Xmx512m}
START_TIMEOUT=${PUPPETSERVER_START_TIMEOUT:-300}
CERTNAME=puppetserver-reference.test

say() { echo "puppetserver.sh: $*" >&2; }
die() {
	say "$*"
	exit 1
}
# free_port, alive, running, await_running, stop_group.
. "$(dirname "${BASH_SOURCE[0]}")/lib/service.sh"
usage() {
	echo "usage: scripts/puppetserver.sh install | start DIR --environments ENVS [--puppetdb URL --cadir CADIR] | stop DIR" >&2
	exit 2
}

# check_version fails unless Debian's puppetserver 7 is installed.
check_version() {
	local v
	v=$(dpkg-query -W -f='${Version}' puppetserver 2>/dev/null || true)
	case "$v" in
	7.*) ;;
	*) die "Debian's puppetserver 7 is required, found '${v:-none}': scripts/puppetserver.sh install (as root)" ;;
	esac
}

cmd_install() {
	if ! dpkg-query -W -f='${Status}' puppetserver 2>/dev/null | grep -q "install ok installed"; then
		[ "$(id -u)" -eq 0 ] || die "puppetserver is not installed; run as root, or: sudo apt-get install -y --no-install-recommends puppetserver"
		say "installing puppetserver with apt-get (one-time, a minute or two)..."
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 puppetserver >/dev/null
	fi
	check_version
	say "ok (puppetserver $(dpkg-query -W -f='${Version}' puppetserver))"
}

# check_installed fails, saying what to install, unless Debian's
# puppetserver 7 (and, with PuppetDB, its termini) is there.
check_installed() {
	check_version
	[ -f "$PS_JAR" ] || die "$PS_JAR is missing (a broken puppetserver package?)"
	command -v java >/dev/null 2>&1 || die "java is missing (puppetserver depends on it: reinstall puppetserver)"
	command -v curl >/dev/null 2>&1 || die "curl is missing: apt-get install -y curl"
	if [ -n "$PUPPETDB" ] && [ ! -f "$TERMINUS" ]; then
		die "puppet-terminus-puppetdb is missing: apt-get install -y --no-install-recommends puppet-terminus-puppetdb"
	fi
}

# write_conf DIR PORT writes Puppet Server's and Puppet's configuration.
write_conf() {
	local dir=$1 port=$2
	mkdir -p "$dir/conf.d" "$dir/services.d" "$dir/puppet" "$dir/code" "$dir/var" "$dir/run" "$dir/log" "$dir/jruby-gems"
	cp "$PS_ETC/services.d/bootstrap.cfg" "$PS_ETC/services.d/ca.cfg" "$dir/services.d/"
	cp "$PS_ETC/conf.d/auth.conf" "$PS_ETC/conf.d/web-routes.conf" "$PS_ETC/conf.d/ca.conf" "$dir/conf.d/"
	cat >"$dir/conf.d/global.conf" <<-EOF
		global: { logging-config: $dir/logback.xml }
	EOF
	cat >"$dir/conf.d/metrics.conf" <<-EOF
		metrics: { server-id: localhost }
	EOF
	cat >"$dir/conf.d/webserver.conf" <<-EOF
		webserver: {
		    access-log-config: $dir/request-logging.xml
		    client-auth: want
		    ssl-host: 127.0.0.1
		    ssl-port: $port
		}
	EOF
	cat >"$dir/conf.d/puppetserver.conf" <<-EOF
		jruby-puppet: {
		    ruby-load-path: [$PS_RUBY]
		    gem-home: $dir/jruby-gems
		    gem-path: [\${jruby-puppet.gem-home}, "$PS_GEMS"]
		    server-conf-dir: $dir/puppet
		    server-code-dir: $dir/code
		    server-var-dir: $dir/var
		    server-run-dir: $dir/run
		    server-log-dir: $dir/log
		    max-active-instances: 1
		}
		http-client: {}
		profiler: {}
		dropsonde: { enabled: false }
		product: { check-for-updates: false }
	EOF
	cat >"$dir/logback.xml" <<-EOF
		<configuration>
		    <appender name="F1" class="ch.qos.logback.core.FileAppender">
		        <file>$dir/log/puppetserver.log</file>
		        <append>true</append>
		        <encoder><pattern>%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} %-5p [%t] [%c{2}] %m%n</pattern></encoder>
		    </appender>
		    <logger name="org.eclipse.jetty" level="INFO"/>
		    <logger name="org.apache.http" level="INFO"/>
		    <logger name="jruby" level="info"/>
		    <root level="info"><appender-ref ref="F1"/></root>
		</configuration>
	EOF
	cat >"$dir/request-logging.xml" <<-EOF
		<configuration debug="false">
		    <appender name="FILE" class="ch.qos.logback.core.FileAppender">
		        <file>$dir/log/access.log</file>
		        <append>true</append>
		        <encoder><pattern>%h %l %u [%t] "%r" %s %b %D</pattern></encoder>
		    </appender>
		    <appender-ref ref="FILE"/>
		</configuration>
	EOF
	{
		cat <<-EOF
			[main]
			certname = $CERTNAME
			dns_alt_names = localhost,127.0.0.1
			confdir = $dir/puppet
			codedir = $dir/code
			vardir = $dir/var
			rundir = $dir/run
			logdir = $dir/log
			ssldir = $dir/ssl
			cadir = $dir/ca
			# Only the environments' own modules (Debian's default adds
			# /usr/share/puppet/modules), as the farm's compiles see.
			basemodulepath = $dir/code/modules

			[server]
			environmentpath = $ENVS
			autosign = true
		EOF
		if [ -n "$PUPPETDB" ]; then
			cat <<-EOF
				storeconfigs = true
				storeconfigs_backend = puppetdb
				reports = puppetdb
			EOF
		else
			echo "reports = none"
		fi
	} >"$dir/puppet/puppet.conf"
	rm -f "$dir/puppet/puppetdb.conf" "$dir/puppet/routes.yaml"
	if [ -n "$PUPPETDB" ]; then
		cat >"$dir/puppet/puppetdb.conf" <<-EOF
			[main]
			server_urls = $PUPPETDB
			soft_write_failure = false
		EOF
		cat >"$dir/puppet/routes.yaml" <<-EOF
			---
			server:
			  facts:
			    terminus: puppetdb
			    cache: yaml
		EOF
	fi
}

# start_server DIR starts Puppet Server and waits until it is running; it
# sets PORT.
start_server() {
	local dir=$1 try pid rc
	for try in 1 2 3; do
		PORT=$(free_port)
		write_conf "$dir" "$PORT"
		say "starting Puppet Server on https://127.0.0.1:$PORT (java $JAVA_ARGS)..."
		: >"$dir/log/stdout.log"
		# shellcheck disable=SC2086 # JAVA_ARGS is a list of options
		setsid java $JAVA_ARGS -Djava.io.tmpdir="$dir/var" -Djruby.lib="$JRUBY_LIB" \
			-Djruby.logger.class=com.puppetlabs.jruby_utils.jruby.Slf4jLogger \
			-XX:+CrashOnOutOfMemoryError -XX:ErrorFile="$dir/log/java_err_pid%p.log" \
			-jar "$PS_JAR" --config "$dir/conf.d" --bootstrap-config "$dir/services.d" \
			</dev/null >>"$dir/log/stdout.log" 2>&1 &
		pid=$!
		echo "$pid" >"$dir/puppetserver.pid"
		rc=0
		await_running "Puppet Server" "$pid" "https://127.0.0.1:$PORT/status/v1/simple" "$dir/log/puppetserver.log" "$dir/log/stdout.log" || rc=$?
		[ "$rc" -eq 0 ] && return 0
		[ "$try" -lt 3 ] && say "port $PORT was taken; trying another"
	done
	die "Puppet Server found no free port in 3 tries"
}

cmd_start() {
	local dir=$1 began tmp
	shift
	ENVS= PUPPETDB= CADIR=
	while [ $# -gt 0 ]; do
		case $1 in
		--environments) ENVS=${2:?}; shift 2 ;;
		--puppetdb) PUPPETDB=${2:?}; shift 2 ;;
		--cadir) CADIR=${2:?}; shift 2 ;;
		*) usage ;;
		esac
	done
	[ -n "$ENVS" ] || usage
	[ -d "$ENVS" ] || die "no environments directory $ENVS"
	ENVS=$(cd "$ENVS" && pwd)
	case $PUPPETDB in
	'' | https://*) ;;
	*) die "--puppetdb $PUPPETDB: the puppetdb termini take only https URLs (give PuppetDB's https URL and --cadir, its CA)" ;;
	esac
	if [ -n "$PUPPETDB" ] && [ -z "$CADIR" ]; then
		die "--puppetdb needs --cadir: the CA PuppetDB's certificate comes from and whose client certificates it trusts"
	fi
	check_installed
	began=$(date +%s)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if alive "$dir/puppetserver.pid" "$dir/conf.d"; then
		die "a Puppet Server started in $dir is running (PID $(cat "$dir/puppetserver.pid")); stop it first: scripts/puppetserver.sh stop $dir"
	fi
	rm -f "$dir/env"
	# Each start is a new server: its certificates come from this start's CA.
	rm -rf "$dir/ca" "$dir/ssl" "$dir/var" "$dir/log"
	if [ -n "$CADIR" ]; then
		[ -s "$CADIR/ca_crt.pem" ] && [ -s "$CADIR/ca_key.pem" ] || die "--cadir $CADIR holds no CA (ca_crt.pem, ca_key.pem)"
		cp -a "$CADIR" "$dir/ca"
		rm -f "$dir/ca/.lock"
	fi
	trap 'cmd_stop "$dir" >/dev/null 2>&1 || true' EXIT
	start_server "$dir"
	tmp=$(mktemp "$dir/.env.XXXXXX")
	cat >"$tmp" <<-EOF
		PUPPETSERVER_DIR=$dir
		PUPPETSERVER_URL=https://127.0.0.1:$PORT
		PUPPETSERVER_PORT=$PORT
		PUPPETSERVER_CACERT=$dir/ssl/certs/ca.pem
		PUPPETSERVER_CERTNAME=$CERTNAME
	EOF
	chmod 0644 "$tmp"
	mv "$tmp" "$dir/env"
	trap - EXIT
	say "Puppet Server is running (https://127.0.0.1:$PORT, PID $(cat "$dir/puppetserver.pid")) after $(($(date +%s) - began)) s ($(usage_of "$(cat "$dir/puppetserver.pid")")); settings in $dir/env"
}

# usage_of PID says what the process has cost: its CPU time (user +
# system, its children's included) and its peak resident memory.
usage_of() {
	local hz cpu hwm
	hz=$(getconf CLK_TCK)
	# Fields 14-17 of /proc/PID/stat, after the command in parentheses.
	cpu=$(sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$hz" '{ printf "%.1f", ($12 + $13 + $14 + $15) / hz }')
	hwm=$(awk '/^VmHWM:/ { printf "%d", $2 / 1024 }' "/proc/$1/status")
	echo "${cpu} s of CPU, peak RSS ${hwm} MB"
}

cmd_stop() {
	local dir=$1 pid i
	[ -d "$dir" ] || die "no directory $dir"
	dir=$(cd "$dir" && pwd)
	rm -f "$dir/env"
	if alive "$dir/puppetserver.pid" "$dir/conf.d"; then
		pid=$(cat "$dir/puppetserver.pid")
		say "stopping Puppet Server (process group $pid): $(usage_of "$pid")..."
		stop_group "Puppet Server" "$pid"
	fi
	rm -f "$dir/puppetserver.pid"
	say "stopped ($dir)"
}

[ $# -ge 1 ] || usage
case $1 in
install) cmd_install ;;
start)
	[ $# -ge 2 ] || usage
	d=$2
	shift 2
	cmd_start "$d" "$@"
	;;
stop)
	[ $# -eq 2 ] || usage
	cmd_stop "$2"
	;;
*) usage ;;
esac
