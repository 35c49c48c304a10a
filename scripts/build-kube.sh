#!/usr/bin/env bash
# Builds kube-apiserver and kubectl (Kubernetes v1.34.4 by default) into
# .cache/kube-<version>/bin and prints that directory. The e2e tests run
# kube-apiserver on a TLS Netsy cluster and check deploy/kubernetes with
# `kubectl apply --dry-run=server` against it.
#
# k8s.io/kubernetes points its staging modules (k8s.io/api, k8s.io/apiserver,
# ...) at ./staging with replace directives, and the module download leaves
# those nested modules out, so `go install` is refused. A copy of the module
# source whose go.mod requires the published staging modules instead
# (v0.<minor>.<patch> for v1.<minor>.<patch>) builds.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ver=${KUBE_VERSION:-v1.34.4}
dir="$top/.cache/kube-$ver"
bin="$dir/bin"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubectl" ]; then
  echo "$bin"
  exit 0
fi
staging="v0.${ver#v1.}"
src="$dir/src"
if [ ! -f "$src/.netsy-prepared" ]; then
  echo "preparing k8s.io/kubernetes@$ver in $src" >&2
  tmp=$(mktemp -d)
  # Outside any module, so the repo's go.mod is never touched.
  moddir=$(cd "$tmp" && GOWORK=off GOFLAGS= go mod download -json "k8s.io/kubernetes@$ver" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  rmdir "$tmp"
  if [ -z "$moddir" ] || [ ! -d "$moddir" ]; then
    echo "could not download k8s.io/kubernetes@$ver" >&2
    exit 1
  fi
  rm -rf "$src.tmp" "$src"
  mkdir -p "$src.tmp"
  cp -R "$moddir/go.mod" "$moddir/go.sum" "$moddir/cmd" "$moddir/pkg" "$moddir/plugin" \
    "$moddir/third_party" "$src.tmp"/
  chmod -R u+w "$src.tmp"
  # Drop the replace block and require the published staging modules.
  awk -v v="$staging" '
    /^replace \($/ { skip = 1; next }
    skip && /^\)$/ { skip = 0; next }
    skip { next }
    /^[[:space:]]+k8s\.io\/[a-z0-9-]+ v0\.0\.0( |$)/ { sub(/v0\.0\.0/, v) }
    { print }
  ' "$moddir/go.mod" >"$src.tmp/go.mod"
  touch "$src.tmp/.netsy-prepared"
  mv "$src.tmp" "$src"
fi
mkdir -p "$bin"
cd "$src"
export GOWORK=off GOFLAGS=-mod=mod
# go.sum lacks the published staging modules; let go fill it in.
go mod download >&2
# The version the binaries report (kubectl's skew check, the apiserver's
# /version) is stamped in by the build, as Kubernetes' own build does.
minor=${ver#v1.}
minor=${minor%%.*}
ld="-X k8s.io/component-base/version.gitVersion=$ver -X k8s.io/component-base/version.gitMajor=1"
ld="$ld -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$ver -X k8s.io/client-go/pkg/version.gitMajor=1"
ld="$ld -X k8s.io/client-go/pkg/version.gitMinor=$minor"
go build -trimpath -ldflags "$ld" -o "$bin/kube-apiserver.tmp" ./cmd/kube-apiserver >&2
go build -trimpath -ldflags "$ld" -o "$bin/kubectl.tmp" ./cmd/kubectl >&2
mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
mv "$bin/kubectl.tmp" "$bin/kubectl"
echo "$bin"
