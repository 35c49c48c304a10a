#!/usr/bin/env bash
# Builds static netsy and netsyctl binaries (no cgo, no libc: they run in an
# empty image) into DIR. The Dockerfile runs it; the e2e suite
# (TestContainerImage) checks its binaries are static, are the ones the
# Dockerfile ships, and run as the image's non-root user.
#   scripts/build-static.sh DIR [COMMIT]
set -euo pipefail
out=${1:?usage: build-static.sh DIR [COMMIT]}
commit=${2:-}
cd "$(dirname "$0")/.."
mkdir -p "$out"
ld="-s -w -X github.com/netsy-io/netsy/internal/version.commit=$commit"
for cmd in netsy netsyctl; do
  CGO_ENABLED=0 go build -trimpath -tags netgo,osusergo -ldflags "$ld" -o "$out/$cmd" "./cmd/$cmd"
done
