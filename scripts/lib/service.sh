# Shell functions shared by the scripts that run a server of their own in a
# directory (scripts/puppetdb.sh, scripts/puppetserver.sh): free ports,
# whether a recorded process still runs, waiting until the server answers,
# stopping one by its process group. Sourced, not run; the sourcing script
# defines say (a progress line on stderr), die (say, then exit 1) and
# START_TIMEOUT (seconds).

# used_ports prints the TCP ports in use on this host, one per line.
used_ports() {
	local h
	awk 'FNR > 1 { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		while read -r h; do echo $((16#$h)); done
}

# free_port prints a TCP port nobody uses, below the ephemeral range (so no
# outgoing connection takes it meanwhile), and not one of its arguments
# (ports already picked but not bound yet). A port can still be taken
# between this and the bind: the callers retry with another.
free_port() {
	local lo=15000 hi eph used port i
	eph=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	hi=$((eph - 1))
	[ "$hi" -gt $((lo + 1000)) ] || { lo=$((eph + 0)) && hi=65000; }
	used=" $(used_ports | tr '\n' ' ') $* "
	for i in $(seq 1 200); do
		port=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
		case "$used" in *" $port "*) continue ;; esac
		echo "$port"
		return 0
	done
	die "no free TCP port found between $lo and $hi"
}

# alive PIDFILE WORD: the process in PIDFILE runs and its command line
# contains WORD (so a recycled PID is never taken for it).
alive() {
	local pid
	[ -s "$1" ] || return 1
	pid=$(head -1 "$1")
	[ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2"
}

# running PID: the process exists and is not a zombie.
running() {
	[ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat"
}

# stop_group NAME PID stops the process group PID leads (the server a
# start began with setsid, and what it started): TERM, up to 30 s, then
# KILL.
stop_group() {
	local name=$1 pid=$2 i
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 30); do
		running "$pid" || return 0
		sleep 1
	done
	say "$name still runs after 30 s; killing it"
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}

# await_running NAME PID URL LOG STDOUT waits until URL (a Trapperkeeper
# /status/v1/simple) answers `running`: 0. When the server (process PID)
# exits because its port was taken, 2: the caller tries other ports. When
# it exits otherwise, or START_TIMEOUT seconds pass, it dies with the end
# of LOG and STDOUT. A progress line every 10 s.
await_running() {
	local name=$1 pid=$2 url=$3 log=$4 out=$5 began last now st
	began=$(date +%s)
	last=$began
	while :; do
		st=$(curl -fksS --max-time 5 "$url" 2>/dev/null || true)
		[ "$st" = running ] && return 0
		if ! running "$pid"; then
			grep -qs "Address already in use" "$out" "$log" && return 2
			die "$name exited before it was running; the end of its logs:
$(tail -n 30 "$log" 2>/dev/null)
$(tail -n 15 "$out")"
		fi
		now=$(date +%s)
		if [ $((now - began)) -ge "$START_TIMEOUT" ]; then
			kill -TERM -- "-$pid" 2>/dev/null || true
			die "$name was not running after ${START_TIMEOUT}s (status '${st:-no answer}'); the end of its log ($log):
$(tail -n 30 "$log" 2>/dev/null)
$(tail -n 15 "$out")"
		fi
		if [ $((now - last)) -ge 10 ]; then
			say "waiting for $name ($((now - began)) s, status '${st:-no answer}')..."
			last=$now
		fi
		sleep 1
	done
}
