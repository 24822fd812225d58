#!/usr/bin/env bash
# Fill hermetic/ of the build context for `docker build --build-arg SOURCE=context
# --network=none .`: everything the image needs that is not in this repository.
#
#   hermetic/manifests/trainer  the upstream Trainer manifests at the pinned commit (from the
#                               cache of hack/get_trainer_manifests.sh, fetched once if missing)
#   hermetic/bin/kustomize      kustomize from hack/ensure-testbin.sh (built from the pinned
#                               go.sum), or $KUSTOMIZE_BIN; it must suit the image's
#                               architecture (the build machine's by default)
#   hermetic/wheels             the wheels of requirements.txt and requirements-build.txt for
#                               the image (CPython 3.12, glibc 2.34, ARCH: x86_64 by default or
#                               aarch64), checked against their pinned hashes as they download
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arch=${ARCH:-$(uname -m)}
pip=${PIP:-$here/.venv/bin/pip}
out=$here/hermetic
rm -rf "$out"
mkdir -p "$out/manifests" "$out/bin" "$out/wheels"

manifests=$(bash "$here/hack/get_trainer_manifests.sh" --cached | tail -n 1)
bash "$here/hack/get_trainer_manifests.sh" --from "$manifests" "$out/manifests/trainer" >/dev/null

if [ -n "${KUSTOMIZE_BIN:-}" ]; then
  cp "$KUSTOMIZE_BIN" "$out/bin/kustomize"
else
  bin_dir=$(TESTBIN_ONLY=kustomize bash "$here/hack/ensure-testbin.sh" | tail -n 1)
  cp "$bin_dir/kustomize" "$out/bin/kustomize"
fi

platforms=()
for m in $(seq 34 -1 17); do platforms+=(--platform "manylinux_2_${m}_${arch}"); done
platforms+=(--platform "manylinux2014_${arch}")
"$pip" download --quiet --no-deps --require-hashes --only-binary=:all: "${platforms[@]}" \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  -r "$here/requirements.txt" -r "$here/requirements-build.txt" -d "$out/wheels"
echo "$out"
