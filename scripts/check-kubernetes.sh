#!/usr/bin/env bash
# Render deploy/kubernetes with Debian's kubectl (kubernetes-client 1.20,
# unpacked by scripts/setup.sh --tests into target/tools; never a kubectl
# found on the PATH) and validate what it renders offline: every object
# against the Kubernetes API schemas the `kubernetes-validate` package ships
# (no cluster), then the rules of a stasis node (scripts/check-kubernetes.py).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBECTL=${KUBECTL:-$REPO/target/tools/kubernetes-client/usr/bin/kubectl}
PY=${PYTHON:-$REPO/.venv/bin/python}
[[ -x $KUBECTL ]] || { echo "check-kubernetes: $KUBECTL missing (scripts/setup.sh --tests)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$KUBECTL" kustomize "$REPO/deploy/kubernetes" >"$out"
"$PY" "$REPO/scripts/check-kubernetes.py" --self-test "$out"
