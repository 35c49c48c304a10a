#!/usr/bin/env bash
# minio.sh manages a throwaway local MinIO server for Netsy's tests.
#
#   minio.sh install          build MinIO into <repo>/.cache/bin (skipped if present)
#   minio.sh start DIR PORT   run MinIO on 127.0.0.1:PORT with DIR as its data dir
#   minio.sh stop DIR         stop the server started with DIR (by DIR/minio.pid)
#
# Environment:
#   NETSY_MINIO_BIN      MinIO binary to use instead of <repo>/.cache/bin/minio
#   MINIO_ROOT_USER      access key (default netsyminio)
#   MINIO_ROOT_PASSWORD  secret key (default netsyminiosecret)
#   MINIO_CONSOLE_PORT   console port (default: a free port above PORT)
#   MINIO_BROWSER        "on" to serve the web console there (default off: tests
#                        never need it and it costs memory on a shared machine)
set -euo pipefail

# A fixed version keeps test behaviour reproducible; bump deliberately.
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"

repo_root() {
	cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd
}

minio_bin() {
	if [[ -n "${NETSY_MINIO_BIN:-}" ]]; then
		echo "$NETSY_MINIO_BIN"
	else
		echo "$(repo_root)/.cache/bin/minio"
	fi
}

die() {
	echo "minio.sh: $*" >&2
	exit 1
}

# port_in_use succeeds if something accepts connections on 127.0.0.1:$1.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

cmd_install() {
	local bin
	bin="$(minio_bin)"
	if [[ -x "$bin" ]]; then
		echo "minio.sh: $bin already installed"
		return 0
	fi
	local gobin
	gobin="$(repo_root)/.cache/bin"
	mkdir -p "$gobin"
	echo "minio.sh: building minio@$MINIO_VERSION into $gobin (takes a few minutes)" >&2
	# GOFLAGS is cleared so a repo-wide -mod setting cannot break the out-of-module install.
	GOFLAGS= GOBIN="$gobin" go install "github.com/minio/minio@$MINIO_VERSION"
	if [[ -n "${NETSY_MINIO_BIN:-}" && "$NETSY_MINIO_BIN" != "$gobin/minio" ]]; then
		echo "minio.sh: note: NETSY_MINIO_BIN=$NETSY_MINIO_BIN; built binary is $gobin/minio" >&2
	fi
}

cmd_start() {
	[[ $# -eq 2 ]] || die "usage: minio.sh start DIR PORT"
	local dir="$1" port="$2" bin
	bin="$(minio_bin)"
	[[ -x "$bin" ]] || die "no minio binary at $bin; run: bash deploy/minio/minio.sh install"
	[[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got $port"
	mkdir -p "$dir/data"
	dir="$(cd "$dir" && pwd)"
	if [[ -f "$dir/minio.pid" ]] && kill -0 "$(cat "$dir/minio.pid")" 2>/dev/null; then
		die "a minio is already running for $dir (pid $(cat "$dir/minio.pid"))"
	fi
	port_in_use "$port" && die "port $port is already in use"

	local console="${MINIO_CONSOLE_PORT:-}"
	if [[ -z "$console" ]]; then
		# Search upwards from PORT+1 so the console stays inside the caller's port range.
		console=$((port + 1))
		while port_in_use "$console"; do
			console=$((console + 1))
		done
	fi

	MINIO_ROOT_USER="${MINIO_ROOT_USER:-netsyminio}" \
		MINIO_ROOT_PASSWORD="${MINIO_ROOT_PASSWORD:-netsyminiosecret}" \
		MINIO_BROWSER="${MINIO_BROWSER:-off}" \
		MINIO_UPDATE=off \
		nohup "$bin" server --quiet \
		--address "127.0.0.1:$port" \
		--console-address "127.0.0.1:$console" \
		"$dir/data" >"$dir/minio.log" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$dir/minio.pid"

	# Readiness: MinIO answers 200 on /minio/health/ready once it serves requests.
	local i
	for i in $(seq 1 300); do
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$dir/minio.log" >&2 || true
			rm -f "$dir/minio.pid"
			die "minio exited during startup (log above)"
		fi
		if curl -fsS -o /dev/null "http://127.0.0.1:$port/minio/health/ready" 2>/dev/null; then
			echo "minio.sh: ready on http://127.0.0.1:$port (pid $pid)"
			return 0
		fi
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	rm -f "$dir/minio.pid"
	die "minio not ready on port $port after 30s; log: $dir/minio.log"
}

cmd_stop() {
	[[ $# -eq 1 ]] || die "usage: minio.sh stop DIR"
	local pidfile="$1/minio.pid" pid
	if [[ ! -f "$pidfile" ]]; then
		echo "minio.sh: no $pidfile; nothing to stop"
		return 0
	fi
	pid="$(cat "$pidfile")"
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		local i
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$pidfile"
	echo "minio.sh: stopped pid $pid"
}

case "${1:-}" in
install) shift; cmd_install "$@" ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
*) die "usage: minio.sh install | start DIR PORT | stop DIR" ;;
esac
