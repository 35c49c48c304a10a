#!/usr/bin/env bash
# Builds promtool (Prometheus v3.16's command line, module version v0.316.0)
# into .cache/bin, for checking and unit-testing deploy/prometheus's rules.
# Skipped when it is there already.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ver=${PROMTOOL_VERSION:-v0.316.0}
bin="$top/.cache/bin"
if [ -x "$bin/promtool" ]; then
  echo "$bin/promtool"
  exit 0
fi
mkdir -p "$bin"
GOBIN="$bin" go install "github.com/prometheus/prometheus/cmd/promtool@$ver" >&2
echo "$bin/promtool"
