#!/usr/bin/env bash
# scale.sh: load N distinct keys into one fresh server with etcd's
# `benchmark put` (64 clients, 8 connections, sequential keys) and print the
# put rate, the data directory's size, RSS, and how long a restart takes
# until a read is served. Issue 22 item 5; see bench/README.md "Scale".
#
#   bench/scale/scale.sh netsy 100000 [val-size]
#   bench/scale/scale.sh etcd 1000000
#
# NETSY_BIN (default bin/netsy) and ETCD_DIR (default
# .cache/etcd-v3.6.10/bin) pick the binaries; NETSY_ARGS adds flags.
# COMPACT=5s runs both with --auto-compaction-mode periodic and that
# retention (the disk row of issue 22 item 4: 400000 keys of 1024 B).
# It does not touch bench/cmd/netsybench, whose harness owns `make bench`.
set -euo pipefail
target=${1:?netsy or etcd}
keys=${2:?number of keys}
val=${3:-256}
root=$(cd "$(dirname "$0")/../.." && pwd)
netsy=${NETSY_BIN:-$root/bin/netsy}
etcdbin=${ETCD_DIR:-$root/.cache/etcd-v3.6.10/bin}
work=$(mktemp -d "${TMPDIR:-/tmp}/netsy-scale.XXXXXX")
data=$work/data
base=$((20000 + RANDOM % 10000))
client=127.0.0.1:$base
pid=
compact=()
[ -n "${COMPACT:-}" ] && compact=(--auto-compaction-mode periodic --auto-compaction-retention "$COMPACT")
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

start() {
	case $target in
	netsy) "$netsy" --data-dir "$data" --client-addr "$client" --http-addr 127.0.0.1:$((base + 1)) \
		--peer-addr 127.0.0.1:$((base + 2)) --log-level warn "${compact[@]}" ${NETSY_ARGS:-} >>"$work/log" 2>&1 & ;;
	etcd) "$etcdbin/etcd" --name scale --data-dir "$data" --listen-client-urls "http://$client" \
		--advertise-client-urls "http://$client" --listen-peer-urls "http://127.0.0.1:$((base + 2))" \
		--initial-advertise-peer-urls "http://127.0.0.1:$((base + 2))" \
		--initial-cluster "scale=http://127.0.0.1:$((base + 2))" --log-level warn "${compact[@]}" >>"$work/log" 2>&1 & ;;
	*) echo "unknown target $target" >&2; exit 2 ;;
	esac
	pid=$!
}
now() { date +%s.%N; }
serving() { # until a linearizable read of a loaded key answers
	local t0=$1
	until "$etcdbin/etcdctl" --endpoints "$client" --command-timeout 1s get foo >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || { echo "server exited:" >&2; tail -20 "$work/log" >&2; exit 1; }
		sleep 0.02
	done
	echo "$(now) - $t0" | bc
}
rss() { awk '/^VmRSS/ {printf "%.0f", $2/1024}' "/proc/$pid/status"; }

start
serving "$(now)" >/dev/null
out=$("$etcdbin/benchmark" --endpoints "$client" --clients 64 --conns 8 put --key-size 8 --sequential-keys \
	--val-size "$val" --total "$keys" --key-space-size "$keys" 2>&1)
rate=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
sleep 5 # let background uploads and snapshots settle, as the harness does
rss_loaded=$(rss)
du_loaded=$(du -sm "$data" | cut -f1)
breakdown=$(cd "$data" && du -sm -- * 2>/dev/null | tr '\t' '=' | tr '\n' ' ')
kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
t0=$(now); start
restart=$(serving "$t0")
sleep 5
rss_after=$(rss)
printf '%s keys=%s val=%s put/s=%s data_MiB=%s rss_MiB=%s restart_s=%.2f rss_after_MiB=%s [%s]\n' \
	"$target" "$keys" "$val" "$rate" "$du_loaded" "$rss_loaded" "$restart" "$rss_after" "$breakdown"
if [ -n "${SCALE_KEEP:-}" ]; then
	kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
	rm -rf "$SCALE_KEEP"; mv "$data" "$SCALE_KEEP"
fi
