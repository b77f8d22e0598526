#!/usr/bin/env bash
# Runs the operator in a local kind cluster: creates the cluster (or reuses it), builds the
# operator image from the Dockerfile, loads it into the cluster's nodes, installs crds/,
# deploys config/ (kustomize) with that image, and runs examples/hero-jobs/ (batch/v1 Jobs) as
# its README does, on nodes labelled for the example's flavor, so the pods really run.
#
# Usage: hack/kind-up.sh
# Needs: docker, kind, kubectl (kubectl's built-in kustomize renders config/).
# Environment:
#   KIND_CLUSTER_NAME  cluster name (default preemption-operator; kubectl context kind-NAME)
#   KIND_NODE_IMAGE    node image for a new cluster, e.g. kindest/node:v1.34.0 (default: kind's)
#   IMAGE              operator image to build and load (default preemption-operator:dev;
#                      avoid :latest, which makes the kubelet try to pull it)
#   OPERATOR_IMAGE_MATCH  config/ images containing this are replaced by IMAGE
#                      (default preemption-operator)
#   SKIP_BUILD=1       load IMAGE as it is, without docker build
#   SKIP_EXAMPLES=1    do not apply examples/hero-jobs/
# Tear down with: kind delete cluster --name "${KIND_CLUSTER_NAME:-preemption-operator}"
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${KIND_CLUSTER_NAME:-preemption-operator}"
CONTEXT="kind-$CLUSTER"
IMAGE="${IMAGE:-preemption-operator:dev}"
MATCH="${OPERATOR_IMAGE_MATCH:-preemption-operator}"

log() { echo "kind-up: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

case "${1:-}" in
  "") ;;
  -h | --help)
    sed -n '2,19s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  *) die "unknown argument: $1 (see --help)" ;;
esac

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH"
done

kc() { kubectl --context "$CONTEXT" "$@"; }

# The manifests of a folder on stdout: rendered by kustomize when it has a kustomization,
# else its *.yaml/*.yml files (recursively, in name order) joined as one stream.
render() {
  local dir="$1" file
  if [ -f "$dir/kustomization.yaml" ] || [ -f "$dir/kustomization.yml" ] || [ -f "$dir/Kustomization" ]; then
    kubectl kustomize "$dir"
    return
  fi
  while IFS= read -r file; do
    printf -- '---\n'
    cat "$file"
    printf '\n'
  done < <(find "$dir" -type f \( -name '*.yaml' -o -name '*.yml' \) | LC_ALL=C sort)
}

# Server-side apply a manifest stream from stdin; print "Kind namespace name" per object
# (namespace "-" for cluster-scoped ones). kubectl prints several objects as one List.
APPLIED_TEMPLATE='{{define "o"}}{{.kind}} {{with .metadata.namespace}}{{.}}{{else}}-{{end}} {{.metadata.name}}
{{end}}{{if .items}}{{range .items}}{{template "o" .}}{{end}}{{else}}{{template "o" .}}{{end}}'
apply_stream() {
  kc apply --server-side --force-conflicts --field-manager=kind-up -f - -o "go-template=$APPLIED_TEMPLATE"
}

# 1. The cluster.
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "reusing kind cluster $CLUSTER"
else
  log "creating kind cluster $CLUSTER"
  create=(kind create cluster --name "$CLUSTER" --wait 180s)
  if [ -n "${KIND_NODE_IMAGE:-}" ]; then create+=(--image "$KIND_NODE_IMAGE"); fi
  "${create[@]}"
fi
kc cluster-info >/dev/null || die "cannot reach the cluster through context $CONTEXT"

# 2. The operator image, built here and copied into the nodes (no registry involved).
if [ "${SKIP_BUILD:-}" != 1 ]; then
  [ -f "$ROOT/Dockerfile" ] || die "no Dockerfile in $ROOT"
  log "building $IMAGE"
  docker build -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
fi
log "loading $IMAGE into $CLUSTER"
kind load docker-image "$IMAGE" --name "$CLUSTER"

# 3. The CRDs, Established before anything that uses them.
[ -d "$ROOT/crds" ] || die "no crds/ folder in $ROOT"
log "installing crds/"
render "$ROOT/crds" | apply_stream >/dev/null
render "$ROOT/crds" | kc wait --for=condition=Established --timeout=60s -f - >&2

# 4. The operator (config/, if present) with the image just loaded. Its image references that
# contain $MATCH become $IMAGE; imagePullPolicy Always would make the kubelet pull the local-only
# image, so it becomes IfNotPresent.
config=""
for dir in "$ROOT/config/default" "$ROOT/config"; do
  if [ -d "$dir" ]; then
    config="$dir"
    break
  fi
done
if [ -n "$config" ]; then
  log "deploying ${config#"$ROOT"/} with image $IMAGE"
  manifests="$(render "$config")"
  if ! grep -Eq "image:[[:space:]]*[\"']?[^[:space:]\"']*${MATCH}" <<<"$manifests"; then
    log "warning: no image in ${config#"$ROOT"/} contains '$MATCH'; IMAGE is not substituted"
  fi
  applied="$(
    sed -E \
      -e "s#^([[:space:]]*(- )?image:[[:space:]]*)[\"']?[^[:space:]\"']*${MATCH}[^[:space:]\"']*[\"']?#\\1$IMAGE#" \
      -e "s#^([[:space:]]*imagePullPolicy:[[:space:]]*)[\"']?Always[\"']?#\\1IfNotPresent#" \
      <<<"$manifests" | apply_stream
  )"
  while read -r kind namespace name; do
    if [ "$kind" = Deployment ]; then
      log "waiting for deployment $namespace/$name"
      kc rollout restart deployment "$name" -n "$namespace" >/dev/null # picks up a rebuilt :dev image
      kc rollout status deployment "$name" -n "$namespace" --timeout=180s
    fi
  done <<<"$applied"
else
  log "no config/ folder yet: the operator itself is not deployed"
fi

# 5. The example, as its README runs it: the research Jobs first, the hero Job once they run.
example="$ROOT/examples/hero-jobs"
if [ "${SKIP_EXAMPLES:-}" != 1 ] && [ -d "$example" ]; then
  log "labelling the nodes for the example's flavor (example.com/pool=on-demand)"
  kc label nodes --all example.com/pool=on-demand --overwrite >/dev/null
  log "applying examples/hero-jobs/cluster.yaml and jobs.yaml"
  apply_stream <"$example/cluster.yaml" | sed 's/^/  /' >&2
  apply_stream <"$example/jobs.yaml" | sed 's/^/  /' >&2
  if [ -n "$config" ]; then
    log "waiting for the operator to start them"
    kc wait --for=jsonpath='{.spec.suspend}'=false job --all -n research --timeout=180s >&2
  fi
  log "applying examples/hero-jobs/pending.yaml"
  apply_stream <"$example/pending.yaml" | sed 's/^/  /' >&2
  log "then: kubectl --context $CONTEXT get jobs -A; kubectl --context $CONTEXT describe job -n research train"
fi

log "done: kubectl --context $CONTEXT get pods -A"
