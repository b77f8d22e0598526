#!/usr/bin/env bash
# The project's whole check, as CI runs it: install into .venv, lint, type-check, verify the
# generated CRDs and ClusterRole, build or reuse the control-plane binaries, and run every test layer.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip # ours to upgrade; an active venv is the user's
  fi
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi

log "installing the package with its test dependencies"
python -m pip install --quiet -e '.[test]'

log "lint and format (ruff)"
ruff check .
ruff format --check .

log "types (mypy --strict)"
mypy

log "generated CRDs are up to date (crds/ and the Helm chart's)"
preemption-operator crds --check
preemption-operator crds --check --output-dir charts/preemption-operator/crds

log "generated ClusterRole is up to date (config/ and the Helm chart's)"
preemption-operator rbac --check
preemption-operator rbac --check --output charts/preemption-operator/templates/clusterrole.yaml

log "shell scripts (shellcheck, from the test extras)"
shellcheck -x hack/*.sh .ci/run benchmarks/kueue-harness/start-ready.sh benchmarks/kueue-harness/*/minimalkueue

log "helm (built from its Go module): lint and render the chart"
if HELM="$(hack/setup-helm.sh)"; then
  export HELM
  "$HELM" lint charts/preemption-operator
  "$HELM" template preemption-operator charts/preemption-operator --include-crds >/dev/null
elif [ -n "${CI:-}" ]; then
  echo "could not build helm; the chart cannot be checked" >&2
  exit 1
else
  echo "helm unavailable: the chart checks in tests/e2e will be skipped" >&2
fi

log "control-plane binaries (kube-apiserver, kube-controller-manager, etcd, kubectl)"
if assets="$(hack/setup-envtest.sh)"; then
  export KUBEBUILDER_ASSETS="$assets"
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
elif [ -n "${CI:-}" ]; then
  echo "could not build or find the control-plane binaries; e2e tests cannot run" >&2
  exit 1
else
  echo "control-plane binaries unavailable: tests/e2e will be skipped" >&2
fi

log "job controllers for the cluster tests (the JobSet controller, from its Go module)"
if ! python hack/setup-controllers.py; then
  if [ -n "${CI:-}" ]; then
    echo "could not build the job controllers; the cluster tests that run them cannot run" >&2
    exit 1
  fi
  echo "job controllers unavailable: the tests that run them will be skipped" >&2
fi

log "Kueue's own scheduler for the differential test (its v0.19.2 Go module and our driver)"
if ! python -m preemption_operator.testing.kueue_replay; then
  if [ -n "${CI:-}" ]; then
    echo "could not build Kueue's scheduler; the engine cannot be compared with it" >&2
    exit 1
  fi
  echo "Kueue's scheduler unavailable: the differential test will be skipped" >&2
fi

log "Debian's chromium for the dashboard's browser test (installed only when missing)"
if CHROMIUM="$(hack/setup-chromium.sh)"; then
  export CHROMIUM
  echo "CHROMIUM=$CHROMIUM"
elif [ -n "${CI:-}" ]; then
  echo "could not find or install chromium; the browser test cannot run" >&2
  exit 1
else
  echo "chromium unavailable: the browser test will be skipped" >&2
fi

log "tests (pytest)"
set +e
pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$status"
