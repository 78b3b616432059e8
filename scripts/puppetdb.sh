#!/usr/bin/env bash
# A real PuppetDB on loopback for tests and development, without the system
# services: Debian's PostgreSQL 15 and PuppetDB 7 run from a directory of
# their own.
#
#   scripts/puppetdb.sh install    installs (as root, with apt-get) what it needs:
#                                  postgresql, puppetdb, puppet-terminus-puppetdb,
#                                  python3-pypuppetdb; checks their versions
#   scripts/puppetdb.sh start DIR  PostgreSQL, a CA, PuppetDB (plain http and
#                                  https) in DIR, in the background; returns
#                                  once PuppetDB answers `running` and DIR/env
#                                  says where it is (KEY=value lines)
#   scripts/puppetdb.sh stop DIR   stops what `start DIR` started
#
# What start makes in DIR:
#   ca/          a CA made with the farm's own pkg/ca (internal/puppetdbtest/mkca),
#                in the layout `broker dev` keeps in DATA/ca: copy it there and
#                that broker's CA is the one PuppetDB trusts client
#                certificates from (any certificate it signed: no allowlist)
#   ssl/         PuppetDB's certificate (puppetdb.test, SANs 127.0.0.1 and
#                localhost) and a client certificate (puppetdb-client.test),
#                keys in ssl/private_keys
#   pg/          PostgreSQL's data (pg/data), socket (pg/sock) and log
#   puppetdb/    PuppetDB's configuration (conf/), data (var/) and logs (log/)
#   *.pid        what stop stops; env, written last (temp file + mv)
#
# start takes 20 s on 2 idle cores, 50-90 s on 2 cores busy with other
# tests (most of it the JVM loading PuppetDB); PuppetDB then holds about
# 450 MB. PUPPETDB_JAVA_ARGS sets the JVM's options and
# PUPPETDB_START_TIMEOUT (default 300 s) how long start waits. The default
# options suit a test bed sharing 2 cores: C1 only (TieredStopAtLevel=1)
# and the serial collector, measured here against plain -Xmx512m, A/B
# alternating at load 14: started in 51 and 86 s (plain: 154 and 140 s),
# 452 MB resident after a workload (plain: 540 MB).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
PG_BIN=/usr/lib/postgresql/15/bin
PDB_JAR=/usr/share/puppetdb/puppetdb.jar
PDB_ETC=/etc/puppetdb
TERMINUS=/usr/lib/ruby/vendor_ruby/puppet/util/puppetdb.rb
# Debian's python3, where python3-pypuppetdb is (not a python3 found first
# on PATH, such as pyenv's).
PYTHON=/usr/bin/python3
JAVA_ARGS=${PUPPETDB_JAVA_ARGS:--Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
START_TIMEOUT=${PUPPETDB_START_TIMEOUT:-300}
SERVER_CERTNAME=puppetdb.test
CLIENT_CERTNAME=puppetdb-client.test

say() { echo "puppetdb.sh: $*" >&2; }
# FAILED: during start, the file die leaves its message in (DIR/failed),
# so that tests waiting for DIR/env fail at once (internal/puppetdbtest).
FAILED=
die() {
	say "$*"
	[ -z "$FAILED" ] || printf '%s\n' "$*" >"$FAILED" || true
	exit 1
}
# free_port, alive, running, await_running, stop_group.
. "$(dirname "${BASH_SOURCE[0]}")/lib/service.sh"
usage() {
	echo "usage: scripts/puppetdb.sh install | start DIR | stop DIR" >&2
	exit 2
}

# missing_pkgs prints the Debian packages that are not installed.
missing_pkgs() {
	local pkgs=()
	[ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ] || pkgs+=(postgresql)
	[ -f "$PDB_JAR" ] && command -v java >/dev/null 2>&1 || pkgs+=(puppetdb)
	[ -f "$TERMINUS" ] || pkgs+=(puppet-terminus-puppetdb)
	"$PYTHON" -c 'import pypuppetdb' >/dev/null 2>&1 || pkgs+=(python3-pypuppetdb)
	command -v curl >/dev/null 2>&1 || pkgs+=(curl)
	echo "${pkgs[*]}"
}

# check_versions fails unless PuppetDB and its terminus are 7.x.
check_versions() {
	local pkg v
	for pkg in puppetdb puppet-terminus-puppetdb; do
		v=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
		case "$v" in
		7.*) ;;
		*) die "$pkg 7.x is required (the farm speaks PuppetDB 7's commands and queries), found '${v:-none}'" ;;
		esac
	done
	"$PG_BIN/postgres" --version >/dev/null || die "PostgreSQL 15 does not run from $PG_BIN"
}

cmd_install() {
	local need
	need=$(missing_pkgs)
	if [ -n "$need" ]; then
		if [ "$(id -u)" -ne 0 ]; then
			say "missing Debian packages: $need"
			die "run as root, or: sudo apt-get install -y --no-install-recommends $need"
		fi
		say "installing $need with apt-get (one-time, a minute or two)..."
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		# shellcheck disable=SC2086 # one word per package
		apt-get install -y -qq --no-install-recommends $need >/dev/null
		need=$(missing_pkgs)
		[ -z "$need" ] || die "still missing after apt-get install: $need"
	fi
	check_versions
	say "ok (puppetdb $(dpkg-query -W -f='${Version}' puppetdb), $("$PG_BIN/postgres" --version), pypuppetdb $(dpkg-query -W -f='${Version}' python3-pypuppetdb 2>/dev/null || echo '?'))"
}

# as_pg runs a command as the postgres user when root (PostgreSQL refuses
# to run as root), as the caller otherwise.
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

make_ca() {
	local dir=$1
	say "making the CA ($dir/ca) and certificates ($dir/ssl) with pkg/ca..."
	mkdir -p "$dir/bin"
	(cd "$ROOT" && $GO build -o "$dir/bin/mkca" ./internal/puppetdbtest/mkca) ||
		die "building internal/puppetdbtest/mkca failed (is Go 1.24+ on PATH? GO=$GO)"
	"$dir/bin/mkca" -cadir "$dir/ca" -ssldir "$dir/ssl" -server "$SERVER_CERTNAME" \
		-server-alt-names "localhost,127.0.0.1" -client "$CLIENT_CERTNAME"
	# PuppetDB (this user) reads its key; the CA key stays private.
	chmod 0755 "$dir/ssl" "$dir/ssl/certs"
}

# PostgreSQL's settings for a throw-away test bed: no fsync (a crash loses
# nothing worth keeping), and tables analyzed soon after a few changes:
# PuppetDB's num-resources metric (Puppetboard's overview) comes from the
# table statistics, -1 until catalog_resources is first analyzed.
PG_SETTINGS="-c fsync=off -c full_page_writes=off -c autovacuum_naptime=10s -c autovacuum_analyze_threshold=1 -c autovacuum_analyze_scale_factor=0.1"

start_postgres() {
	local dir=$1 try port
	local data=$dir/pg/data sock=$dir/pg/sock
	mkdir -p "$dir/pg" "$sock"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$dir/pg" "$sock"
		runuser -u postgres -- test -x "$dir/pg" ||
			die "the postgres user cannot reach $dir/pg: make $dir and every parent directory traversable (chmod o+x)"
	fi
	if [ ! -s "$data/PG_VERSION" ]; then
		say "initdb $data..."
		as_pg "$PG_BIN/initdb" -D "$data" -U postgres -E UTF8 --locale=C.UTF-8 --auth=trust >"$dir/pg/initdb.log" 2>&1 ||
			die "initdb failed: $(tail -5 "$dir/pg/initdb.log")"
	fi
	for try in 1 2 3 4 5; do
		port=$(free_port)
		say "starting PostgreSQL on 127.0.0.1:$port..."
		if as_pg "$PG_BIN/pg_ctl" -D "$data" -l "$dir/pg/postgresql.log" -w -t 60 -s \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $sock $PG_SETTINGS" start; then
			head -1 "$data/postmaster.pid" >"$dir/postgresql.pid"
			echo "$port" >"$dir/pg/port"
			break
		fi
		grep -q "could not bind\|already in use" "$dir/pg/postgresql.log" 2>/dev/null ||
			die "PostgreSQL did not start; the end of $dir/pg/postgresql.log:
$(tail -20 "$dir/pg/postgresql.log" 2>/dev/null)"
		say "port $port was taken; trying another"
		[ "$try" -lt 5 ] || die "PostgreSQL found no free port in 5 tries"
	done
	as_pg "$PG_BIN/psql" -h "$sock" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt >/dev/null <<-'SQL' || die "creating PuppetDB's role and database failed"
		SELECT 'CREATE ROLE puppetdb LOGIN PASSWORD ''puppetdb''' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'puppetdb')\gexec
		SELECT 'CREATE DATABASE puppetdb OWNER puppetdb ENCODING ''UTF8'' TEMPLATE template0' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'puppetdb')\gexec
	SQL
	as_pg "$PG_BIN/psql" -h "$sock" -p "$port" -U postgres -d puppetdb -v ON_ERROR_STOP=1 -qAt \
		-c 'CREATE EXTENSION IF NOT EXISTS pg_trgm' >/dev/null || die "CREATE EXTENSION pg_trgm failed (Debian's postgresql-15 has it)"
}

# write_puppetdb_conf DIR PGPORT HTTPPORT HTTPSPORT
write_puppetdb_conf() {
	local dir=$1 pgport=$2 port=$3 sslport=$4
	local conf=$dir/puppetdb/conf log=$dir/puppetdb/log
	mkdir -p "$conf/conf.d" "$dir/puppetdb/var" "$log"
	cp "$PDB_ETC/bootstrap.cfg" "$conf/bootstrap.cfg"
	cat >"$conf/logback.xml" <<-EOF
		<configuration>
		    <appender name="F1" class="ch.qos.logback.core.FileAppender">
		        <file>$log/puppetdb.log</file>
		        <append>true</append>
		        <encoder><pattern>%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} %-5p [%c{2}] %m%n</pattern></encoder>
		    </appender>
		    <logger name="org.springframework.jms.connection" level="warn"/>
		    <root level="info"><appender-ref ref="F1"/></root>
		</configuration>
	EOF
	cat >"$conf/request-logging.xml" <<-EOF
		<configuration debug="false">
		    <appender name="FILE" class="ch.qos.logback.core.FileAppender">
		        <file>$log/puppetdb-access.log</file>
		        <append>true</append>
		        <encoder><pattern>%h %l %u [%t] "%r" %s %b "%i{Referer}" "%i{User-Agent}" %D</pattern></encoder>
		    </appender>
		    <appender-ref ref="FILE"/>
		</configuration>
	EOF
	cat >"$conf/conf.d/config.ini" <<-EOF
		[global]
		vardir = $dir/puppetdb/var
		logging-config = $conf/logback.xml

		[command-processing]
		threads = 1
		# Refuse commands over 16 MiB (413), as a site that bounds them
		# does: the farm must log such a command and set it aside, not
		# retry it (pkg/puppetdb's TestDrainer).
		reject-large-commands = true
		max-command-size = 16777216

		[puppetdb]
		# No phoning home from a test bed; no certificate-allowlist: every
		# certificate the CA signed may connect over https.
		disable-update-checking = true
	EOF
	cat >"$conf/conf.d/database.ini" <<-EOF
		[database]
		subname = //127.0.0.1:$pgport/puppetdb
		username = puppetdb
		password = puppetdb
	EOF
	cat >"$conf/conf.d/jetty.ini" <<-EOF
		[jetty]
		host = 127.0.0.1
		port = $port
		ssl-host = 127.0.0.1
		ssl-port = $sslport
		ssl-cert = $dir/ssl/certs/$SERVER_CERTNAME.pem
		ssl-key = $dir/ssl/private_keys/$SERVER_CERTNAME.pem
		# Client certificates must come from this CA (Jetty's default
		# client-auth is "need": no certificate, no connection).
		ssl-ca-cert = $dir/ca/ca_crt.pem
		access-log-config = $conf/request-logging.xml
	EOF
	# Debian's auth.conf with one change, for this loopback test bed only:
	# /metrics is open to clients without a certificate (Debian's rule,
	# allow: "*", wants one, which fails Puppetboard's overview over plain
	# http). In production, give such a client a certificate instead.
	cat >"$conf/conf.d/auth.conf" <<-'EOF'
		authorization: {
		    version: 1
		    rules: [
		        {
		            match-request: { path: "/status/v1/services", type: path, method: get }
		            allow-unauthenticated: true
		            sort-order: 500
		            name: "puppetlabs status service - full"
		        },
		        {
		            match-request: { path: "/status/v1/simple", type: path, method: get }
		            allow-unauthenticated: true
		            sort-order: 500
		            name: "puppetlabs status service - simple"
		        },
		        {
		            # Test bed: unauthenticated (Debian's: allow: "*").
		            match-request: { path: "/metrics", type: path, method: [get, post] }
		            allow-unauthenticated: true
		            sort-order: 500
		            name: "puppetlabs puppetdb metrics"
		        },
		        {
		            match-request: { path: "/", type: path }
		            deny: "*"
		            sort-order: 999
		            name: "puppetlabs deny all"
		        }
		    ]
		}
	EOF
}

# start_puppetdb DIR PGPORT starts PuppetDB and waits until it is running;
# it sets PDB_PORT and PDB_SSLPORT.
start_puppetdb() {
	local dir=$1 pgport=$2 try port sslport pid rc
	local log=$dir/puppetdb/log
	for try in 1 2 3; do
		port=$(free_port)
		sslport=$(free_port "$port")
		write_puppetdb_conf "$dir" "$pgport" "$port" "$sslport"
		say "starting PuppetDB on http://127.0.0.1:$port and https://127.0.0.1:$sslport (java $JAVA_ARGS)..."
		: >"$log/stdout.log"
		# shellcheck disable=SC2086 # JAVA_ARGS is a list of options
		setsid java $JAVA_ARGS -Djava.io.tmpdir="$dir/puppetdb/var" \
			-cp "$PDB_JAR" clojure.main -m puppetlabs.puppetdb.core services \
			--config "$dir/puppetdb/conf/conf.d" --bootstrap-config "$dir/puppetdb/conf/bootstrap.cfg" \
			</dev/null >>"$log/stdout.log" 2>&1 &
		pid=$!
		echo "$pid" >"$dir/puppetdb.pid"
		rc=0
		await_running PuppetDB "$pid" "http://127.0.0.1:$port/status/v1/simple" "$log/puppetdb.log" "$log/stdout.log" || rc=$?
		if [ "$rc" -eq 0 ]; then
			PDB_PORT=$port PDB_SSLPORT=$sslport
			return 0
		fi
		[ "$try" -lt 3 ] && say "a port was taken; trying others"
	done
	die "PuppetDB found no free ports in 3 tries"
}

# start_failed is start's EXIT trap on failure: it leaves DIR/failed
# (die's message, or this one) and stops what start started.
start_failed() {
	local rc=$? dir=$1
	[ -s "$dir/failed" ] || echo "scripts/puppetdb.sh start $dir failed (exit $rc); see its output" >"$dir/failed"
	FAILED='' cmd_stop "$dir" >/dev/null 2>&1 || true
}

cmd_start() {
	local dir=$1 began pgport port sslport tmp need
	began=$(date +%s)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if alive "$dir/puppetdb.pid" "$dir/puppetdb/conf"; then
		die "a PuppetDB started in $dir is running (PID $(cat "$dir/puppetdb.pid")); stop it first: scripts/puppetdb.sh stop $dir"
	fi
	rm -f "$dir/env" "$dir/failed"
	FAILED=$dir/failed
	START_DIR=$dir
	trap 'start_failed "$START_DIR"' EXIT
	need=$(missing_pkgs)
	[ -z "$need" ] || die "missing Debian packages: $need; run scripts/puppetdb.sh install (as root)"
	check_versions
	# PostgreSQL runs as postgres: it must reach its directory (mktemp -d makes 0700).
	chmod 0755 "$dir"
	make_ca "$dir"
	start_postgres "$dir"
	pgport=$(cat "$dir/pg/port")
	start_puppetdb "$dir" "$pgport"
	port=$PDB_PORT sslport=$PDB_SSLPORT
	check_tls "$dir" "$sslport"
	tmp=$(mktemp "$dir/.env.XXXXXX")
	cat >"$tmp" <<-EOF
		COMPILEFARM_PUPPETDB_DIR=$dir
		COMPILEFARM_PUPPETDB_URL=http://127.0.0.1:$port
		COMPILEFARM_PUPPETDB_TLS_URL=https://127.0.0.1:$sslport
		COMPILEFARM_PUPPETDB_CADIR=$dir/ca
		COMPILEFARM_PUPPETDB_CACERT=$dir/ca/ca_crt.pem
		COMPILEFARM_PUPPETDB_CLIENT_CERT=$dir/ssl/certs/$CLIENT_CERTNAME.pem
		COMPILEFARM_PUPPETDB_CLIENT_KEY=$dir/ssl/private_keys/$CLIENT_CERTNAME.pem
	EOF
	chmod 0644 "$tmp"
	mv "$tmp" "$dir/env"
	trap - EXIT
	say "PuppetDB is running (http://127.0.0.1:$port, https://127.0.0.1:$sslport; PIDs: PuppetDB $(cat "$dir/puppetdb.pid"), PostgreSQL $(cat "$dir/postgresql.pid")) after $(($(date +%s) - began)) s; settings in $dir/env"
}

# check_tls: the https port answers a client certificate from the CA.
check_tls() {
	local dir=$1 sslport=$2 st
	st=$(curl -fsS --max-time 10 --cacert "$dir/ca/ca_crt.pem" \
		--cert "$dir/ssl/certs/$CLIENT_CERTNAME.pem" --key "$dir/ssl/private_keys/$CLIENT_CERTNAME.pem" \
		"https://127.0.0.1:$sslport/status/v1/simple" 2>&1) ||
		die "PuppetDB's https port refused the CA's client certificate: $st"
	[ "$st" = running ] || die "PuppetDB over https answered '$st', not running"
}

cmd_stop() {
	local dir=$1 pid i
	[ -d "$dir" ] || die "no directory $dir"
	dir=$(cd "$dir" && pwd)
	rm -f "$dir/env"
	if alive "$dir/puppetdb.pid" "$dir/puppetdb/conf"; then
		pid=$(cat "$dir/puppetdb.pid")
		say "stopping PuppetDB (process group $pid)..."
		stop_group PuppetDB "$pid"
	fi
	rm -f "$dir/puppetdb.pid"
	if [ -s "$dir/pg/data/postmaster.pid" ]; then
		say "stopping PostgreSQL..."
		as_pg "$PG_BIN/pg_ctl" -D "$dir/pg/data" -m fast -w -t 60 -s stop ||
			die "pg_ctl stop failed; see $dir/pg/postgresql.log"
	fi
	rm -f "$dir/postgresql.pid"
	say "stopped ($dir)"
}

[ $# -ge 1 ] || usage
case $1 in
install) cmd_install ;;
start)
	[ $# -eq 2 ] || usage
	cmd_start "$2"
	;;
stop)
	[ $# -eq 2 ] || usage
	cmd_stop "$2"
	;;
*) usage ;;
esac
