#!/usr/bin/env bash
# Builds t4 (v1.1.17), the S3-backed etcd-compatible store bench-cluster
# compares with, into .cache/t4-<version>/bin and prints that directory.
# t4's module has no replace directives, so `go install pkg@version` pins it
# from the module proxy; a binary already there is kept.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ver=${T4_VERSION:-v1.1.17}
bin="$top/.cache/t4-$ver/bin"
if [ -x "$bin/t4" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
GOBIN="$bin" go install "github.com/t4db/t4/cmd/t4@$ver" >&2
echo "$bin"
