#!/usr/bin/env bash
# Installs helm (v3.22.0 by default) into .cache/bin and prints its path. The
# chart in deploy/helm/netsy is linted and rendered with it, `make manifests`
# regenerates deploy/kubernetes from it, and the e2e deploy test dry-runs its
# output against kube-apiserver. helm's main module carries no replace
# directives, so a plain `go install pkg@version` builds it (a cold build takes
# minutes; later runs find it built and return at once).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ver=${HELM_VERSION:-v3.22.0}
bin="$top/.cache/bin"
# The version is part of the name, so bumping HELM_VERSION rebuilds instead
# of silently reusing an older helm.
exe="$bin/helm-$ver"
if [ ! -x "$exe" ]; then
  mkdir -p "$bin"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # What helm's own Makefile stamps in with -ldflags: the version `helm
  # version` reports, and the Kubernetes version of its client-go (v0.M.N is
  # Kubernetes 1.M), which `helm template` and `helm lint` assume without
  # --kube-version (unstamped, they assume 1.20). Everything runs outside
  # any module, so the repository's go.mod is never touched.
  gomod=$(cd "$tmp" && GOWORK=off GOFLAGS= go mod download -json "helm.sh/helm/v3@$ver" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  minor=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
  if [ -z "$minor" ]; then
    echo "helm $ver: no k8s.io/client-go version in $gomod" >&2
    exit 1
  fi
  ldflags="-X helm.sh/helm/v3/internal/version.version=$ver"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  (cd "$tmp" && GOWORK=off GOFLAGS= GOBIN="$tmp" go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$ver") >&2
  mv "$tmp/helm" "$exe"
fi
ln -sf "helm-$ver" "$bin/helm"
echo "$bin/helm"
