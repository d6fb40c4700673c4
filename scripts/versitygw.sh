#!/usr/bin/env bash
# versitygw.sh — start and stop a local Versity S3 gateway (posix backend) for
# os2g's demo, end-to-end tests, benchmarks and CI.
#
#   scripts/versitygw.sh start DIR   start a gateway whose state lives in DIR
#                                    (objects in DIR/data, log in DIR/versitygw.log);
#                                    prints `export ...` lines on stdout and writes
#                                    them to DIR/env as well, so either
#                                      eval "$(scripts/versitygw.sh start DIR)"
#                                    or
#                                      scripts/versitygw.sh start DIR >/dev/null; . DIR/env
#                                    works.
#   scripts/versitygw.sh stop DIR    stop the gateway started with DIR (idempotent).
#   scripts/versitygw.sh status DIR  exit 0 if that gateway is running and answers.
#
# Environment (all optional):
#   VGW_BIN      versitygw binary (default: versitygw on PATH, else $HOME/go/bin/versitygw)
#   VGW_PORT     TCP port on 127.0.0.1 (default: a free port chosen at start);
#                start fails clearly if the port is already taken.
#   VGW_ACCESS   root access key (default: os2gadmin)
#   VGW_SECRET   root secret key (default: os2gsecretkey)
#   VGW_REGION   region (default: us-east-1)
#   VGW_TIMEOUT  seconds to wait for the gateway to answer (default: 30)
#
# The exported variables are AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION, AWS_ENDPOINT_URL (read by aws-sdk-go-v2, hence by os2g and by the
# AWS CLI), VGW_ENDPOINT, VGW_PORT and VGW_PID.
set -euo pipefail

die() { echo "versitygw.sh: $*" >&2; exit 1; }

usage() {
	sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

find_bin() {
	if [[ -n "${VGW_BIN:-}" ]]; then
		[[ -x "$VGW_BIN" ]] || die "VGW_BIN=$VGW_BIN is not an executable file"
		echo "$VGW_BIN"
	elif command -v versitygw >/dev/null 2>&1; then
		command -v versitygw
	elif [[ -x "$HOME/go/bin/versitygw" ]]; then
		echo "$HOME/go/bin/versitygw"
	else
		die "versitygw not found (install with: go install github.com/versity/versitygw/cmd/versitygw@latest, or set VGW_BIN)"
	fi
}

# port_in_use PORT: true if something listens on 127.0.0.1:PORT.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: a port the kernel hands out as free right now.
free_port() {
	local p
	for py in /usr/bin/python3 python3; do
		if p=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null); then
			echo "$p"
			return 0
		fi
	done
	# No python: probe a random range.
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "could not find a free TCP port"
}

# answers PORT: true once the gateway answers HTTP (any status) on PORT.
answers() {
	local code
	if command -v curl >/dev/null 2>&1; then
		code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$1/" 2>/dev/null) || true
		[[ -n "$code" && "$code" != "000" ]]
	else
		port_in_use "$1"
	fi
}

pid_alive() {
	[[ -n "$1" ]] && kill -0 "$1" 2>/dev/null && grep -qa versitygw "/proc/$1/cmdline" 2>/dev/null
}

cmd_start() {
	local dir=$1
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local pidfile="$dir/versitygw.pid" log="$dir/versitygw.log"
	if [[ -f "$pidfile" ]] && pid_alive "$(cat "$pidfile")"; then
		die "a gateway started with $dir is already running (pid $(cat "$pidfile")); run: $0 stop $dir"
	fi
	local bin port access secret region timeout
	bin=$(find_bin)
	access=${VGW_ACCESS:-os2gadmin}
	secret=${VGW_SECRET:-os2gsecretkey}
	region=${VGW_REGION:-us-east-1}
	timeout=${VGW_TIMEOUT:-30}
	if [[ -n "${VGW_PORT:-}" ]]; then
		port=$VGW_PORT
		[[ "$port" =~ ^[0-9]+$ ]] || die "VGW_PORT=$port is not a port number"
		if port_in_use "$port"; then
			die "port 127.0.0.1:$port is already in use (another gateway or service); pick another VGW_PORT or leave it unset for a free one"
		fi
	else
		port=$(free_port)
	fi
	mkdir -p "$dir/data"
	: >"$log"
	# setsid: the gateway must not receive the terminal's SIGINT meant for the
	# caller, and must not hold the caller's stdout open.
	ROOT_ACCESS_KEY_ID="$access" ROOT_SECRET_ACCESS_KEY="$secret" \
		setsid "$bin" --port "127.0.0.1:$port" --region "$region" --keep-alive --quiet \
		posix "$dir/data" </dev/null >>"$log" 2>&1 &
	local pid=$!
	echo "$pid" >"$pidfile"
	local deadline=$((SECONDS + timeout))
	until answers "$port"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$pidfile"
			echo "versitygw.sh: versitygw exited during start; last lines of $log:" >&2
			tail -n 20 "$log" >&2 || true
			exit 1
		fi
		if ((SECONDS >= deadline)); then
			kill "$pid" 2>/dev/null || true
			rm -f "$pidfile"
			echo "versitygw.sh: versitygw did not answer on 127.0.0.1:$port within ${timeout}s; last lines of $log:" >&2
			tail -n 20 "$log" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
	# The port was free when chosen; make sure it is our process that answers.
	if ! kill -0 "$pid" 2>/dev/null; then
		rm -f "$pidfile"
		die "port 127.0.0.1:$port answers but versitygw (pid $pid) exited; another process took the port. Log: $log"
	fi
	cat >"$dir/env" <<EOF
export AWS_ACCESS_KEY_ID=$access
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=$region
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export VGW_ENDPOINT=http://127.0.0.1:$port
export VGW_PORT=$port
export VGW_PID=$pid
EOF
	cat "$dir/env"
	echo "versitygw.sh: versitygw pid $pid listening on http://127.0.0.1:$port (data $dir/data, log $log)" >&2
}

cmd_stop() {
	local dir=$1
	local pidfile="$dir/versitygw.pid"
	[[ -f "$pidfile" ]] || return 0
	local pid
	pid=$(cat "$pidfile")
	if pid_alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			pid_alive "$pid" || break
			sleep 0.1
		done
		if pid_alive "$pid"; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$pidfile"
}

cmd_status() {
	local dir=$1
	local pidfile="$dir/versitygw.pid"
	[[ -f "$pidfile" && -f "$dir/env" ]] || die "no gateway started with $dir"
	local pid port
	pid=$(cat "$pidfile")
	port=$(sed -n 's/^export VGW_PORT=//p' "$dir/env")
	pid_alive "$pid" || die "gateway pid $pid is not running"
	answers "$port" || die "gateway pid $pid does not answer on 127.0.0.1:$port"
	echo "versitygw pid $pid answers on http://127.0.0.1:$port"
}

[[ $# -eq 2 ]] || usage
case "$1" in
start) cmd_start "$2" ;;
stop) cmd_stop "$2" ;;
status) cmd_status "$2" ;;
*) usage ;;
esac
