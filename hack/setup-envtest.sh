#!/usr/bin/env bash
# Fills a cache folder with kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
# kubectl and kwok (controller-runtime's envtest layout, plus what a cluster of fake nodes needs)
# and prints the folder, so that `export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)` works.
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl are built from the
# k8s.io/kubernetes Go module, etcd from go.etcd.io/etcd/server/v3 at the version that Kubernetes
# release uses, kwok from sigs.k8s.io/kwok. Nothing is installed outside the cache folder, and
# nothing needs root.
#
# Usage: hack/setup-envtest.sh [--installed-only]
#   --installed-only  build nothing: print the folder if the assets are already there and
#                     current, else exit 1.
# Environment: ENVTEST_K8S_VERSION (default 1.34.4), ENVTEST_ETCD_VERSION (default 3.6.5),
# ENVTEST_KWOK_VERSION (default 0.8.0), ENVTEST_CACHE (cache root).
set -euo pipefail

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.34.4}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-3.6.5}" # build/dependencies.yaml of Kubernetes 1.34.4
KWOK_VERSION="${ENVTEST_KWOK_VERSION:-0.8.0}"
CACHE_ROOT="${ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/preemption-operator/envtest}"
ASSETS="$CACHE_ROOT/k8s-$K8S_VERSION"

installed_only=false
for arg in "$@"; do
  case "$arg" in
    --installed-only | -i) installed_only=true ;;
    -h | --help)
      sed -n '2,14s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "setup-envtest: unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

log() { echo "setup-envtest: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

complete() {
  local dir="$1"
  [ -n "$dir" ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-controller-manager" ] &&
    [ -x "$dir/kube-scheduler" ] && [ -x "$dir/etcd" ] && [ -x "$dir/kubectl" ] && [ -x "$dir/kwok" ]
}

if complete "${KUBEBUILDER_ASSETS:-}"; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

mkdir -p "$ASSETS"

build_k8s_binaries() {
  # A throwaway module: k8s.io/kubernetes lists its staging modules at v0.0.0, which the
  # module proxy does not serve; each is replaced by the tag of the same minor release.
  command -v go >/dev/null || die "the Go toolchain is needed to build kube-apiserver"
  local work out minor gomod ldflags pkg cmd
  local -a pkgs=()
  work="$(mktemp -d)"
  # Built next to the assets, so that each one's final move is a rename on one filesystem.
  out="$(mktemp -d "$ASSETS/.build.XXXXXX")"
  # shellcheck disable=SC2064 # expand $work and $out now: the trap runs after the locals are gone
  trap "rm -rf '$work' '$out'" RETURN
  minor="${K8S_VERSION#*.}"
  minor="${minor%%.*}"
  # Stamp the version as the release build does (hack/lib/version.sh), so that /version
  # and `kubectl version` report v$K8S_VERSION rather than v0.0.0-master.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=${K8S_VERSION%%.*}"
    ldflags+=" -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  cd "$work"
  go mod init envtest-build >/dev/null 2>&1
  gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@v$K8S_VERSION"
  {
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    grep -E '^[[:space:]]+k8s\.io/[a-z0-9./-]+ v0\.0\.0$' "$gomod" | awk -v v="v0.$minor.${K8S_VERSION##*.}" '{print "replace " $1 " => " $1 " " v}'
  } >>go.mod
  {
    echo 'package main'
    for cmd in "$@"; do echo "import _ \"k8s.io/kubernetes/cmd/$cmd\""; done
    echo 'func main() {}'
  } >tools.go
  log "resolving modules for k8s.io/kubernetes v$K8S_VERSION"
  go mod tidy >&2
  # One `go build` for all of them: they share most of their packages, and one invocation
  # compiles each package once and keeps both cores busy through every link.
  for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  log "building $* in one go build (a cold build took 6 minutes on 2 cores)"
  CGO_ENABLED=0 go build -tags providerless -trimpath -ldflags="$ldflags" -o "$out/" "${pkgs[@]}" >&2
  for cmd in "$@"; do mv "$out/$cmd" "$ASSETS/$cmd"; done
}

# etcd's server module pins its own dependencies: it gets a throwaway module of its own.
build_etcd() {
  command -v go >/dev/null || die "the Go toolchain is needed to build etcd"
  local work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand $work now: the trap runs after the local is gone
  trap "rm -rf '$work'" RETURN
  cd "$work"
  go mod init etcd-build >/dev/null 2>&1
  printf 'package main\nimport _ "go.etcd.io/etcd/server/v3"\nfunc main() {}\n' >tools.go
  log "resolving go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2
  go mod tidy >&2
  log "building etcd (a cold build takes a few minutes)"
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$ASSETS/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
  mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
}

# kwok's module pins its own dependencies: `go install` builds it as its go.mod says.
build_kwok() {
  command -v go >/dev/null || die "the Go toolchain is needed to build kwok"
  local bin
  bin="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand $bin now: the trap runs after the local is gone
  trap "rm -rf '$bin'" RETURN
  log "building kwok v$KWOK_VERSION (a cold build takes a few minutes)"
  CGO_ENABLED=0 GOBIN="$bin" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" >&2
  mv "$bin/kwok" "$ASSETS/kwok"
}

# A binary is current when it reports this release; a link to a machine's binary or an older
# build (one without the version stamp reports v0.0.0-master) is built again.
current() {
  local name="$1"
  [ -x "$ASSETS/$name" ] && [ ! -L "$ASSETS/$name" ] || return 1
  case "$name" in
    kube-apiserver | kube-controller-manager | kube-scheduler)
      [ "$("$ASSETS/$name" --version 2>/dev/null)" = "Kubernetes v$K8S_VERSION" ]
      ;;
    # Read whole, then matched: `grep -q` in a pipe may stop the binary mid-write (SIGPIPE),
    # which pipefail would count as an outdated binary.
    kubectl)
      grep -qx "Client Version: v$K8S_VERSION" <<<"$("$ASSETS/kubectl" version --client 2>/dev/null || true)"
      ;;
    etcd)
      grep -qx "etcd Version: $ETCD_VERSION" <<<"$("$ASSETS/etcd" --version 2>/dev/null || true)"
      ;;
    kwok)
      grep -q "^kwok version v$KWOK_VERSION " <<<"$("$ASSETS/kwok" --version 2>/dev/null || true)"
      ;;
  esac
}

need_build=()
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  current "$cmd" || need_build+=("$cmd")
done
if [ "${#need_build[@]}" -gt 0 ]; then
  $installed_only && exit 1
  (build_k8s_binaries "${need_build[@]}") # each replaces its binary only once built: users never see a gap
fi
if ! current etcd; then
  $installed_only && exit 1
  (build_etcd)
fi
if ! current kwok; then
  $installed_only && exit 1
  (build_kwok)
fi

complete "$ASSETS" || die "assets in $ASSETS are incomplete"
echo "$ASSETS"
