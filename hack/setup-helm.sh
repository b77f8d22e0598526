#!/usr/bin/env bash
# Builds helm from the helm.sh/helm/v3 Go module into a cache folder and prints the binary's
# path, so that `HELM=$(hack/setup-helm.sh)` works. Nothing is installed outside the cache.
#
# Usage: hack/setup-helm.sh [--installed-only]
#   --installed-only  build nothing: print the path if helm is already there, else exit 1.
# Environment: HELM_VERSION (default 3.19.0), ENVTEST_CACHE's sibling cache root.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-3.19.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/preemption-operator/helm"
BIN="$CACHE_ROOT/v$HELM_VERSION/helm"

installed_only=false
for arg in "$@"; do
  case "$arg" in
    --installed-only | -i) installed_only=true ;;
    -h | --help)
      sed -n '2,8s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "setup-helm: unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

log() { echo "setup-helm: $*" >&2; }

current() {
  [ -x "$BIN" ] && grep -q "v$HELM_VERSION" <<<"$("$BIN" version --short 2>/dev/null || true)"
}

if ! current; then
  $installed_only && exit 1
  command -v go >/dev/null || {
    log "error: the Go toolchain is needed to build helm"
    exit 1
  }
  work="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand $work now
  trap "rm -rf '$work'" EXIT
  mkdir -p "$(dirname "$BIN")"
  cd "$work"
  go mod init helm-build >/dev/null 2>&1
  printf 'package main\nimport _ "helm.sh/helm/v3/cmd/helm"\nfunc main() {}\n' >tools.go
  log "resolving helm.sh/helm/v3 v$HELM_VERSION"
  go get "helm.sh/helm/v3@v$HELM_VERSION" >&2
  go mod tidy >&2
  log "building helm (a cold build takes a few minutes)"
  CGO_ENABLED=0 go build -trimpath \
    -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
    -o "$BIN.tmp" helm.sh/helm/v3/cmd/helm >&2
  mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
