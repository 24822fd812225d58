#!/usr/bin/env bash
# The release artifacts of this checkout's version, into dist/ (or the directory given):
#
#   odh_training_functions-<version>-py3-none-any.whl   the product wheel (what the image installs)
#   odh-training-functions-<version>-crds.yaml           the CRDs and the guards' admission policy
#   odh-training-functions-<version>-kubernetes.yaml     config/default (Knative on Kubernetes)
#   odh-training-functions-<version>-openshift.yaml      config/overlays/openshift (Open Data Hub)
#   odh-training-functions-<version>-rhoai.yaml          config/overlays/rhoai (OpenShift AI)
#   SHA256SUMS                                           `sha256sum -c SHA256SUMS` checks them
#
# A user applies one rendered install with `kubectl apply -f` (or `--server-side`), no clone or
# kustomize needed. kustomize: $KUSTOMIZE, else the one hack/ensure-testbin.sh builds (once,
# cached). The wheel is built from a clean copy of what the image build copies, with the
# setuptools of the environment (`make venv` pins it).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$repo/dist}
python=${PYTHON:-python3}
kustomize=${KUSTOMIZE:-}
if [ -z "$kustomize" ]; then
  kustomize="$(TESTBIN_ONLY=kustomize bash "$repo/hack/ensure-testbin.sh")/kustomize"
fi

version=$("$python" -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
name=odh-training-functions-$version

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "dist: $name into $out" >&2
mkdir "$work/source"
cp "$repo/pyproject.toml" "$repo/README.md" "$repo/LICENSE" "$work/source/"
(cd "$repo" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - functions) |
  tar -xf - -C "$work/source"
"$python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$work/wheel" \
  "$work/source"

declare -A installs=(
  [crds]=config/crd
  [kubernetes]=config/default
  [openshift]=config/overlays/openshift
  [rhoai]=config/overlays/rhoai
)
for kind in crds kubernetes openshift rhoai; do
  "$kustomize" build "$repo/${installs[$kind]}" > "$work/$name-$kind.yaml"
done

files=("$(basename "$work"/wheel/*.whl)" "$name-crds.yaml" "$name-kubernetes.yaml"
       "$name-openshift.yaml" "$name-rhoai.yaml")
mv "$work"/wheel/*.whl "$out/"
for kind in crds kubernetes openshift rhoai; do mv "$work/$name-$kind.yaml" "$out/"; done
(cd "$out" && sha256sum "${files[@]}" > SHA256SUMS)
for file in "${files[@]}" SHA256SUMS; do echo "$out/$file"; done
