#!/usr/bin/env bash
# Runs the kube-apiserver etcd3 storage test suites (k8s.io/apiserver
# pkg/storage/etcd3 and pkg/storage/cacher) against an external server
# process started per test: netsy (default) or a real etcd.
#
#   test/k8s/run.sh [netsy|etcd] [package...]
#
# Packages: etcd3, cacher (short for ./pkg/storage/<name>), ./pkg/... or a full
# import path; default: etcd3 cacher. See test/k8s/README.md.
#
# Environment:
#   NETSY_BIN              netsy binary (default: build ./cmd/netsy into .cache/bin/netsy)
#   ETCD_BIN               etcd binary  (default: scripts/build-etcd.sh)
#   K8S_APISERVER_VERSION  k8s.io/apiserver version (default v0.34.13)
#   K8S_TEST_TIMEOUT       time one top-level test may run before it is stopped (default 3m)
#   K8S_TEST_PARALLEL      -test.parallel inside each test process (default 4)
#   K8S_TEST_RUN           only top-level tests matching this regexp
#   K8S_TEST_SKIP          skip top-level tests matching this regexp
#   K8S_TEST_ALLOW_ANY_START_REV=1  do not fail tests whose fresh server is not at revision 1
#   NETSY_LOG_LEVEL        --log-level for netsy (default info)
#   NETSY_CLUSTER_NODES    nodes per server (netsy; > 1: a cluster, tests talk to
#                          a replica); a list such as "1 3" runs one pass per
#                          count side by side on the same compiled tests
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
here="$top/test/k8s"

target=${1:-netsy}
[ $# -gt 0 ] && shift
case "$target" in
netsy | etcd) ;;
*)
  echo "usage: $0 [netsy|etcd] [package...]" >&2
  exit 2
  ;;
esac

pkgs=()
for p in "${@:-etcd3 cacher}"; do
  for q in $p; do
    case "$q" in
    ./* | k8s.io/apiserver/*) pkgs+=("$q") ;;
    *) pkgs+=("./pkg/storage/$q") ;;
    esac
  done
done

ver=${K8S_APISERVER_VERSION:-v0.34.13}
cache="$top/.cache/k8s"
src="$cache/apiserver@$ver"
mkdir -p "$cache/bin"

# 1. A writable copy of the k8s.io/apiserver module source, made once.
if [ ! -f "$src/.netsy-prepared" ]; then
  echo "preparing k8s.io/apiserver@$ver in $src" >&2
  tmp=$(mktemp -d)
  # Outside any module, so the repo's go.mod is never touched.
  moddir=$(cd "$tmp" && GOWORK=off go mod download -json "k8s.io/apiserver@$ver" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  rmdir "$tmp"
  if [ -z "$moddir" ] || [ ! -d "$moddir" ]; then
    echo "could not download k8s.io/apiserver@$ver" >&2
    exit 1
  fi
  rm -rf "$src.tmp" "$src"
  cp -R "$moddir" "$src.tmp"
  chmod -R u+w "$src.tmp"
  touch "$src.tmp/.netsy-prepared"
  mv "$src.tmp" "$src"
fi

# 2. Our testserver replaces the upstream embedded-etcd one (on every run).
ts="$src/pkg/storage/etcd3/testserver"
rm -f "$ts"/*.go
cp "$here"/testserver/*.go "$ts"/

# 3. The server binary.
case "$target" in
netsy)
  unset ETCD_BIN
  if [ -z "${NETSY_BIN:-}" ]; then
    if [ ! -d "$top/cmd/netsy" ]; then
      echo "cmd/netsy does not exist yet: set NETSY_BIN or run '$0 etcd'" >&2
      exit 1
    fi
    (cd "$top" && go build -o .cache/bin/netsy ./cmd/netsy)
    NETSY_BIN="$top/.cache/bin/netsy"
  fi
  NETSY_BIN=$(readlink -f "$NETSY_BIN")
  export NETSY_BIN
  bin=$NETSY_BIN
  ;;
etcd)
  unset NETSY_BIN
  if [ -z "${ETCD_BIN:-}" ]; then
    ETCD_BIN="$(bash "$top/scripts/build-etcd.sh")/etcd"
  fi
  ETCD_BIN=$(readlink -f "$ETCD_BIN")
  export ETCD_BIN
  bin=$ETCD_BIN
  ;;
esac
[ -x "$bin" ] || {
  echo "not an executable: $bin" >&2
  exit 1
}

# 4. Compile each package's tests once (go test -c); suite/ runs them like go test
#    does, with a watchdog per top-level test (see suite/main.go).
tools="$cache/bin"
(cd "$here" && GOWORK=off go build -o "$tools/k8s-suite" ./suite)
[ -x "$tools/test2json" ] || go build -o "$tools/test2json" cmd/test2json

results="$cache/results/$target-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$results"

# One pass per node count of NETSY_CLUSTER_NODES (netsy only; a single
# count, or none, is one pass with its results directly in $results).
read -r -a counts <<<"$(echo "${NETSY_CLUSTER_NODES:-}" | tr , ' ')"
if [ "$target" != netsy ]; then
  counts=("")
elif [ "${#counts[@]}" -eq 0 ]; then
  counts=("")
fi
passdir() { if [ "${#counts[@]}" -gt 1 ]; then echo "$results/nodes-$1"; else echo "$results"; fi; }
for n in "${counts[@]}"; do
  mkdir -p "$(passdir "$n")"
  : >"$(passdir "$n")/pids"
done

# Stop any server a crashed or killed test process left behind.
cleanup() {
  local pid n=0 c
  for c in "${counts[@]}"; do
    while read -r pid; do
      [ -n "$pid" ] || continue
      if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ]; then
        kill -9 "$pid" 2>/dev/null && n=$((n + 1))
      fi
    done <"$(passdir "$c")/pids"
  done
  [ "$n" -eq 0 ] || echo "stopped $n leftover server process(es)" >&2
}
trap cleanup EXIT

suiteargs=()
for p in "${pkgs[@]}"; do
  ip=$(cd "$src" && GOWORK=off go list "$p")
  dir=$(cd "$src" && GOWORK=off go list -f '{{.Dir}}' "$p")
  testbin="$tools/$(echo "${ip#k8s.io/apiserver/}" | tr / _).test"
  echo "compiling $ip tests" >&2
  (cd "$src" && GOWORK=off go test -c -o "$testbin" "$p")
  suiteargs+=("$ip" "$dir" "$testbin")
done

# pass runs the suites once against servers of n nodes (empty: the default).
pass() {
  local n=$1 out
  out=$(passdir "$n")
  (
    if [ -n "$n" ]; then export NETSY_CLUSTER_NODES=$n; else unset NETSY_CLUSTER_NODES; fi
    export K8S_TEST_LOG_DIR="$out/server-logs" K8S_TEST_PID_FILE="$out/pids"
    "$tools/k8s-suite" -test2json "$tools/test2json" -raw "$out/test.json" \
      -timeout "${K8S_TEST_TIMEOUT:-3m}" -parallel "${K8S_TEST_PARALLEL:-4}" \
      -run "${K8S_TEST_RUN:-}" -skip "${K8S_TEST_SKIP:-}" "${suiteargs[@]}" >"$out/summary.txt" 2>&1
  )
}

if [ "${#counts[@]}" -le 1 ]; then
  echo "running ${pkgs[*]} against $target ($bin), k8s.io/apiserver@$ver; results in $results" >&2
  export K8S_TEST_LOG_DIR="$results/server-logs" K8S_TEST_PID_FILE="$results/pids"
  "$tools/k8s-suite" -test2json "$tools/test2json" -raw "$results/test.json" \
    -timeout "${K8S_TEST_TIMEOUT:-3m}" -parallel "${K8S_TEST_PARALLEL:-4}" \
    -run "${K8S_TEST_RUN:-}" -skip "${K8S_TEST_SKIP:-}" "${suiteargs[@]}" 2>&1 | tee "$results/summary.txt"
  exit
fi

# Several passes: the servers wait far more than they compute (a pass keeps
# under half of one core busy: 62 CPU-s in a 148 s pass), so they run side
# by side; each pass's console output is printed whole when it ends.
echo "running ${pkgs[*]} against $target ($bin) with ${counts[*]} node(s) per server, side by side, k8s.io/apiserver@$ver; results in $results/nodes-<n>" >&2
pids=()
for n in "${counts[@]}"; do
  pass "$n" &
  pids+=($!)
done
rc=0
for i in "${!counts[@]}"; do
  wait "${pids[$i]}" || rc=1
  echo "=== ${counts[$i]} node(s) per server (results in $(passdir "${counts[$i]}"))"
  cat "$(passdir "${counts[$i]}")/summary.txt"
done
exit $rc
