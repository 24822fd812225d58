#!/usr/bin/env bash
# Put the upstream Kubeflow Trainer manifests (the opendatahub-io/trainer `manifests/` tree,
# whose `rhoai` overlay the trainer function renders) into a destination directory.
#
# The tree is fetched from a pinned commit and never committed here. A local mirror of that
# commit's tree can stand in for the download (offline machines, CI), given explicitly.
#
# Usage: hack/get_trainer_manifests.sh [--from DIR] [--cached | DEST]
#   DEST        target directory (default: build/manifests/trainer); replaced atomically
#   --cached    the per-commit cache outside the repository instead of DEST:
#               $TRAINER_MANIFESTS_CACHE/<TRAINER_REF>, filled only when missing
#   --from DIR  copy DIR (a `manifests/` tree of TRAINER_REF) instead of downloading
# Environment:
#   TRAINER_MANIFESTS_SOURCE  same as --from
#   TRAINER_MANIFESTS_CACHE   cache root (default:
#                             ${XDG_CACHE_HOME:-$HOME/.cache}/odh-training-functions/manifests)
#   TRAINER_REPO              git URL (default: https://github.com/opendatahub-io/trainer.git)
#   TRAINER_REF               commit to fetch (default: the pinned one below)
# Output: the directory holding the tree, on the last line of stdout.
set -euo pipefail

TRAINER_REPO=${TRAINER_REPO:-https://github.com/opendatahub-io/trainer.git}
TRAINER_REF=${TRAINER_REF:-d140e85264020f29d1e5a8d959ab2fde4aec6681}
source_dir=${TRAINER_MANIFESTS_SOURCE:-}
dest=""
cached=0

while [ $# -gt 0 ]; do
  case "$1" in
    --from) source_dir=${2:?--from needs a directory}; shift 2 ;;
    --from=*) source_dir=${1#--from=}; shift ;;
    --cached) cached=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) dest=$1; shift ;;
  esac
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$cached" = 1 ]; then
  [ -z "$dest" ] || { echo "get_trainer_manifests: --cached takes no DEST" >&2; exit 2; }
  cache_root=${TRAINER_MANIFESTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/odh-training-functions/manifests}
  dest=$cache_root/$TRAINER_REF
  # A cache entry only ever appears by the rename below, so one that exists is complete.
  if [ -d "$dest" ]; then echo "$dest"; exit 0; fi
  mkdir -p "$cache_root"
  exec 9>"$cache_root/$TRAINER_REF.lock"
  flock 9
  if [ -d "$dest" ]; then echo "$dest"; exit 0; fi
fi
dest=${dest:-$here/build/manifests/trainer}
mkdir -p "$(dirname "$dest")"
staging=$(mktemp -d "$(dirname "$dest")/.trainer-manifests-XXXXXX")
trap 'rm -rf "$staging"' EXIT

if [ -n "$source_dir" ]; then
  [ -f "$source_dir/rhoai/kustomization.yaml" ] || {
    echo "get_trainer_manifests: $source_dir has no rhoai/kustomization.yaml" >&2; exit 1; }
  # -L is not used: symlinks are not followed, as the renderer skips them too.
  cp -R "$source_dir/." "$staging/tree"
  chmod -R u+w "$staging/tree"
  echo "$TRAINER_REPO@$TRAINER_REF (copied from $source_dir)" > "$staging/tree/SOURCE"
else
  clone=$staging/clone
  git init -q "$clone"
  git -C "$clone" remote add origin "$TRAINER_REPO"
  git -C "$clone" fetch -q --depth 1 origin "$TRAINER_REF" || {
    echo "get_trainer_manifests: cannot fetch $TRAINER_REF from $TRAINER_REPO; offline, point" \
         "TRAINER_MANIFESTS_SOURCE (or --from) at a copy of that commit's manifests/ tree" >&2
    exit 1; }
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
