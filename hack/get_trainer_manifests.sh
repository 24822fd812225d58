#!/usr/bin/env bash
# Put the upstream Kubeflow Trainer manifests (the opendatahub-io/trainer `manifests/` tree,
# whose `rhoai` overlay the trainer function renders) into a destination directory.
#
# The tree is fetched at build time from a pinned commit and never committed here. A local
# copy can stand in for the download (tests and offline builds).
#
# Usage: hack/get_trainer_manifests.sh [--from DIR] [DEST]
#   DEST        target directory (default: build/manifests/trainer); replaced atomically
#   --from DIR  copy DIR (a `manifests/` tree) instead of downloading
# Environment:
#   TRAINER_MANIFESTS_SOURCE  same as --from
#   TRAINER_REPO              git URL (default: https://github.com/opendatahub-io/trainer.git)
#   TRAINER_REF               commit to fetch (default: the pinned one below)
set -euo pipefail

TRAINER_REPO=${TRAINER_REPO:-https://github.com/opendatahub-io/trainer.git}
TRAINER_REF=${TRAINER_REF:-d140e85264020f29d1e5a8d959ab2fde4aec6681}
source_dir=${TRAINER_MANIFESTS_SOURCE:-}
dest=""

while [ $# -gt 0 ]; do
  case "$1" in
    --from) source_dir=${2:?--from needs a directory}; shift 2 ;;
    --from=*) source_dir=${1#--from=}; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) dest=$1; shift ;;
  esac
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${dest:-$here/build/manifests/trainer}
mkdir -p "$(dirname "$dest")"
staging=$(mktemp -d "$(dirname "$dest")/.trainer-manifests-XXXXXX")
trap 'rm -rf "$staging"' EXIT

if [ -n "$source_dir" ]; then
  [ -f "$source_dir/rhoai/kustomization.yaml" ] || {
    echo "get_trainer_manifests: $source_dir has no rhoai/kustomization.yaml" >&2; exit 1; }
  # -L is not used: symlinks are not followed, as the renderer skips them too.
  cp -R "$source_dir/." "$staging/tree"
else
  clone=$staging/clone
  git init -q "$clone"
  git -C "$clone" remote add origin "$TRAINER_REPO"
  git -C "$clone" fetch -q --depth 1 origin "$TRAINER_REF"
  git -C "$clone" -c advice.detachedHead=false checkout -q FETCH_HEAD -- manifests
  mv "$clone/manifests" "$staging/tree"
  echo "$TRAINER_REPO@$TRAINER_REF" > "$staging/tree/SOURCE"
fi

for required in rhoai/kustomization.yaml rhoai/params.env component_metadata.yaml; do
  [ -f "$staging/tree/$required" ] || {
    echo "get_trainer_manifests: fetched tree lacks $required" >&2; exit 1; }
done

rm -rf "$dest.old"
if [ -e "$dest" ]; then mv "$dest" "$dest.old"; fi
mv "$staging/tree" "$dest"
rm -rf "$dest.old"
echo "$dest"
