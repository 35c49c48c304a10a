#!/usr/bin/env bash
# local-cluster.sh runs a three-node Netsy cluster on loopback for trying
# things out: one MinIO (deploy/minio/minio.sh) and three netsy processes
# sharing one bucket.
#
#   local-cluster.sh start    build netsy and netsyctl (make build), start MinIO
#                             and nodes n1, n2, n3, wait until netsyctl
#                             cluster-state shows one Elector and one Primary,
#                             print how to reach them
#   local-cluster.sh status   the recorded processes and netsyctl cluster-state
#   local-cluster.sh restart NODE
#                             stop node NODE (n1, n2 or n3; SIGTERM: a Primary
#                             hands its role off first) and start it again with
#                             the same flags and data, waiting until its /readyz
#                             is 200
#   local-cluster.sh stop     stop exactly the processes start recorded (SIGTERM,
#                             SIGKILL after 30 s); the data is kept
#   local-cluster.sh clean    remove the data (refused while anything runs)
#
# A second start reuses the data: the nodes come back with their ids and the
# bucket's contents.
#
# Environment:
#   NETSY_CLUSTER_DIR        data, logs and PIDs (default <repo>/.cache/local-cluster,
#                            git-ignored)
#   NETSY_CLUSTER_PORT_BASE  first port (default 24000): MinIO BASE, its console
#                            BASE+1, node i client BASE+10i, peer +1, HTTP +2.
#                            start writes it to NETSY_CLUSTER_DIR/port-base;
#                            status, restart and stop use the one written there,
#                            and a later start reuses it unless this is set
#   NETSY_CLUSTER_ARGS       extra flags for every node (space-separated; start
#                            writes them to NETSY_CLUSTER_DIR/args for restart)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${NETSY_CLUSTER_DIR:-$root/.cache/local-cluster}"
# The port base the cluster was started with is what status, restart and
# stop must reach it at, whatever the environment says now.
recorded_base="$(cat "$dir/port-base" 2>/dev/null || true)"
if [[ "${1:-}" == start ]]; then
	base="${NETSY_CLUSTER_PORT_BASE:-${recorded_base:-24000}}"
else
	base="${recorded_base:-${NETSY_CLUSTER_PORT_BASE:-24000}}"
	if [[ -n "$recorded_base" && -n "${NETSY_CLUSTER_PORT_BASE:-}" && "$NETSY_CLUSTER_PORT_BASE" != "$recorded_base" ]]; then
		echo "local-cluster.sh: using port base $recorded_base, which start recorded in $dir/port-base (not NETSY_CLUSTER_PORT_BASE=$NETSY_CLUSTER_PORT_BASE)" >&2
	fi
fi
nodes=(n1 n2 n3)
bucket=netsy
prefix=local
minio_user=netsyminio
minio_password=netsyminiosecret
region=us-east-1
netsy="$root/bin/netsy"
netsyctl="$root/bin/netsyctl"
pids="$dir/pids"

die() {
	echo "local-cluster.sh: $*" >&2
	exit 1
}

[[ "$base" =~ ^[0-9]+$ ]] && ((base >= 20000 && base + 40 < 32000)) ||
	die "NETSY_CLUSTER_PORT_BASE must be a number in [20000, 31960), got $base"

minio_port=$base
minio_console=$((base + 1))
client_port() { echo $((base + 10 * $1)); }
peer_port() { echo $((base + 10 * $1 + 1)); }
http_port() { echo $((base + 10 * $1 + 2)); }

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_time prints the kernel's start time of pid (field 22 of
# /proc/PID/stat), which tells a recorded process from a later one that
# reused its PID.
start_time() {
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	# The command name (field 2) may hold spaces; count from after its ')'.
	stat="${stat##*) }"
	# shellcheck disable=SC2086
	set -- $stat
	echo "${20}"
}

# alive NAME PID START succeeds if PID is still the process recorded as NAME.
alive() {
	local now
	now="$(start_time "$2")" || return 1
	[[ "$now" == "$3" ]]
}

record() {
	local name="$1" pid="$2" st
	st="$(start_time "$pid")" || die "$name (pid $pid) exited at once; log in $dir"
	echo "$name $pid $st" >>"$pids"
}

# running_any succeeds if any recorded process is still alive.
running_any() {
	[[ -f "$pids" ]] || return 1
	local name pid st
	while read -r name pid st; do
		alive "$name" "$pid" "$st" && return 0
	done <"$pids"
	return 1
}

endpoints() {
	local i eps=()
	for i in 1 2 3; do
		eps+=("127.0.0.1:$(client_port "$i")")
	done
	(IFS=,; echo "${eps[*]}")
}

# roles prints "ELECTOR PRIMARY NODES" from netsyctl cluster-state, or
# fails while there is no answer.
roles() {
	local out
	out="$("$netsyctl" cluster-state --endpoints "$(endpoints)" --timeout 2s -o json 2>/dev/null)" || return 1
	jq -r '[([.nodes[] | select(.elector)] | length), ([.nodes[] | select(.primary)] | length), (.nodes | length),
		(.elector.node_id // "-"), (.primary.node_id // "-")] | @tsv' <<<"$out"
}

# start_node I starts node nI with the flags start gives it (and the extra
# flags start recorded) and records it.
start_node() {
	local i="$1" id="n$1" extra=()
	read -r -a extra <"$dir/args" || true
	mkdir -p "$dir/$id"
	(
		cd "$dir/$id"
		# setsid: the node outlives this script and the terminal's ^C;
		# it is not a group leader here, so setsid execs without forking
		# and $! below is the node's own PID.
		AWS_ACCESS_KEY_ID=$minio_user AWS_SECRET_ACCESS_KEY=$minio_password exec setsid "$netsy" \
			--node-id "$id" \
			--data-dir "$dir/$id/data" \
			--client-addr "127.0.0.1:$(client_port "$i")" \
			--peer-addr "127.0.0.1:$(peer_port "$i")" \
			--http-addr "127.0.0.1:$(http_port "$i")" \
			--storage "s3://$bucket/$prefix" --s3-endpoint "http://127.0.0.1:$minio_port" --s3-path-style --s3-region "$region" \
			"${extra[@]}"
	) >>"$dir/$id/netsy.log" 2>&1 </dev/null &
	record "$id" $!
}

cmd_start() {
	command -v jq >/dev/null || die "jq is needed (apt-get install -y jq)"
	command -v curl >/dev/null || die "curl is needed"
	if running_any; then
		die "already running (bash deploy/local-cluster.sh status; stop it with: bash deploy/local-cluster.sh stop)"
	fi
	local p i
	for p in "$minio_port" "$minio_console" $(for i in 1 2 3; do client_port "$i"; peer_port "$i"; http_port "$i"; done); do
		port_in_use "$p" && die "port $p is in use; pick other ports with NETSY_CLUSTER_PORT_BASE"
	done

	echo "local-cluster.sh: building netsy and netsyctl (make build)" >&2
	make -C "$root" --no-print-directory build >&2
	bash "$root/deploy/minio/minio.sh" install >&2

	mkdir -p "$dir"
	rm -f "$pids"
	# Whatever fails from here on stops what was started.
	trap 'echo "local-cluster.sh: start failed; stopping what was started" >&2; cmd_stop >&2' EXIT

	MINIO_ROOT_USER=$minio_user MINIO_ROOT_PASSWORD=$minio_password MINIO_CONSOLE_PORT=$minio_console \
		bash "$root/deploy/minio/minio.sh" start "$dir/minio" "$minio_port" >&2
	record minio "$(cat "$dir/minio/minio.pid")"
	local s3="http://127.0.0.1:$minio_port"
	local sig=(--user "$minio_user:$minio_password" --aws-sigv4 "aws:amz:$region:s3")
	if ! curl -fsS -o /dev/null -I "${sig[@]}" "$s3/$bucket" 2>/dev/null; then
		curl -fsS -o /dev/null -X PUT "${sig[@]}" "$s3/$bucket" || die "cannot create bucket $bucket on $s3"
	fi

	echo "$base" >"$dir/port-base"
	printf '%s\n' "${NETSY_CLUSTER_ARGS:-}" >"$dir/args"
	for i in 1 2 3; do
		start_node "$i"
	done

	echo -n "local-cluster.sh: waiting for one Elector and one Primary" >&2
	local got="" deadline=$((SECONDS + 90))
	while ((SECONDS < deadline)); do
		local name pid st
		while read -r name pid st; do
			alive "$name" "$pid" "$st" || { echo >&2; tail -n 20 "$dir/$name/netsy.log" "$dir/minio/minio.log" 2>/dev/null >&2; die "$name (pid $pid) exited; log tail above"; }
		done <"$pids"
		if got="$(roles)" && [[ "$(cut -f1-3 <<<"$got")" == $'1\t1\t3' ]]; then
			break
		fi
		got=""
		echo -n . >&2
		sleep 0.5
	done
	echo >&2
	[[ -n "$got" ]] || die "no Elector and Primary after 90 s; logs in $dir/n*/netsy.log"
	trap - EXIT

	local elector primary
	elector="$(cut -f4 <<<"$got")"
	primary="$(cut -f5 <<<"$got")"
	local etcdctl=etcdctl
	[[ -x "$root/.cache/etcd-v3.6.10/bin/etcdctl" ]] && etcdctl="$root/.cache/etcd-v3.6.10/bin/etcdctl"
	echo "Netsy local cluster is up: Elector $elector, Primary $primary (data and logs in $dir)"
	echo
	printf '  %-5s %-17s %-17s %-24s %s\n' node client peer http pid
	for i in 1 2 3; do
		printf '  %-5s %-17s %-17s %-24s %s\n' "n$i" "127.0.0.1:$(client_port "$i")" "127.0.0.1:$(peer_port "$i")" \
			"http://127.0.0.1:$(http_port "$i")" "$(awk -v n="n$i" '$1 == n {print $2}' "$pids")"
	done
	printf '  %-5s %-17s %-17s %-24s %s\n' minio "$s3" "" "bucket $bucket/$prefix" "$(awk '$1 == "minio" {print $2}' "$pids")"
	echo
	echo "  $etcdctl --endpoints=$(endpoints) put greeting hello"
	echo "  $netsyctl cluster-state --endpoints $(endpoints)"
	echo "  curl http://127.0.0.1:$(http_port 1)/cluster/state    # also /cluster/leader, /readyz, /metrics"
	echo "  MinIO: $s3 (access key $minio_user, secret $minio_password)"
	echo
	echo "Status: bash deploy/local-cluster.sh status   Stop: bash deploy/local-cluster.sh stop"
}

# stop_one sends SIGTERM to a recorded process and waits for it, with
# SIGKILL after 30 s.
stop_one() {
	local name="$1" pid="$2" st="$3" i
	if ! alive "$name" "$pid" "$st"; then
		echo "local-cluster.sh: $name (pid $pid) is not running"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		alive "$name" "$pid" "$st" || { echo "local-cluster.sh: stopped $name (pid $pid)"; return 0; }
		sleep 0.1
	done
	alive "$name" "$pid" "$st" && kill -KILL "$pid" 2>/dev/null || true
	echo "local-cluster.sh: $name (pid $pid) ignored SIGTERM for 30 s; killed"
}

cmd_stop() {
	if [[ ! -f "$pids" ]]; then
		echo "local-cluster.sh: nothing recorded in $pids; nothing to stop"
		return 0
	fi
	# The Primary last: each node that leaves before it only deregisters,
	# and the Primary, alone then, has nobody to hand its role to.
	local primary="" name pid st
	primary="$(curl -fsS --max-time 2 "http://127.0.0.1:$(http_port 1)/cluster/leader" 2>/dev/null | jq -r '.primary.node_id // ""' 2>/dev/null)" || primary=""
	local order=()
	while read -r name pid st; do
		[[ "$name" == minio || "$name" == "$primary" ]] || order+=("$name $pid $st")
	done <"$pids"
	while read -r name pid st; do
		[[ "$name" == "$primary" ]] && order+=("$name $pid $st")
	done <"$pids"
	while read -r name pid st; do
		[[ "$name" == minio ]] && order+=("$name $pid $st")
	done <"$pids"
	local line
	for line in "${order[@]}"; do
		# shellcheck disable=SC2086
		stop_one $line
	done
	rm -f "$pids" "$dir/minio/minio.pid"
}

cmd_status() {
	if [[ ! -f "$pids" ]]; then
		echo "local-cluster.sh: not started (no $pids)"
		return 1
	fi
	local name pid st up=0
	while read -r name pid st; do
		if alive "$name" "$pid" "$st"; then
			echo "$name: running (pid $pid)"
			up=$((up + 1))
		else
			echo "$name: not running (was pid $pid)"
		fi
	done <"$pids"
	((up > 0)) || return 1
	echo
	"$netsyctl" cluster-state --endpoints "$(endpoints)"
}

# cmd_restart NODE stops one recorded node and starts it again.
cmd_restart() {
	local node="${1:-}" i
	[[ "$node" =~ ^n([123])$ ]] || die "usage: local-cluster.sh restart n1|n2|n3"
	i="${BASH_REMATCH[1]}"
	[[ -f "$pids" ]] || die "not started (no $pids)"
	local name pid st found=""
	while read -r name pid st; do
		[[ "$name" == "$node" ]] && found="$name $pid $st"
	done <"$pids"
	[[ -n "$found" ]] || die "$node is not recorded in $pids"
	# shellcheck disable=SC2086
	stop_one $found
	grep -v "^$node " "$pids" >"$pids.new" || true
	mv "$pids.new" "$pids"
	start_node "$i"
	echo -n "local-cluster.sh: waiting for $node to be ready" >&2
	local deadline=$((SECONDS + 60))
	while ((SECONDS < deadline)); do
		while read -r name pid st; do
			[[ "$name" == "$node" ]] && ! alive "$name" "$pid" "$st" && { echo >&2; tail -n 20 "$dir/$node/netsy.log" >&2; die "$node (pid $pid) exited; log tail above"; }
		done <"$pids"
		if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$(http_port "$i")/readyz" 2>/dev/null; then
			echo >&2
			echo "local-cluster.sh: restarted $node (pid $(awk -v n="$node" '$1 == n {print $2}' "$pids"))"
			return 0
		fi
		echo -n . >&2
		sleep 0.5
	done
	echo >&2
	die "$node not ready after 60 s; log in $dir/$node/netsy.log"
}

cmd_clean() {
	running_any && die "still running; stop it first: bash deploy/local-cluster.sh stop"
	rm -rf "$dir"
	echo "local-cluster.sh: removed $dir"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
restart) cmd_restart "${2:-}" ;;
clean) cmd_clean ;;
*) die "usage: local-cluster.sh start | status | restart NODE | stop | clean" ;;
esac
