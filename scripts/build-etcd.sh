#!/usr/bin/env bash
# Builds etcd, etcdctl and etcd's benchmark tool (v3.6.10) into .cache/etcd/bin.
# etcd's modules carry replace directives, so `go install pkg@version` is refused;
# a scratch module that requires them and builds the packages works instead.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ver=${ETCD_VERSION:-v3.6.10}
dir="$top/.cache/etcd-$ver"
bin="$dir/bin"
if [ -x "$bin/etcd" ] && [ -x "$bin/etcdctl" ] && [ -x "$bin/benchmark" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$dir/mod" "$bin"
cd "$dir/mod"
if [ ! -f go.mod ]; then
  go mod init netsy.local/etcdtools >/dev/null 2>&1
fi
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
	_ "go.etcd.io/etcd/v3/tools/benchmark"
)
GO
go get "go.etcd.io/etcd/v3@$ver" "go.etcd.io/etcd/server/v3@$ver" "go.etcd.io/etcd/etcdctl/v3@$ver" >&2
go mod tidy >&2 || true
go build -o "$bin/etcd" go.etcd.io/etcd/server/v3 >&2
go build -o "$bin/etcdctl" go.etcd.io/etcd/etcdctl/v3 >&2
go build -o "$bin/benchmark" go.etcd.io/etcd/v3/tools/benchmark >&2
echo "$bin"
