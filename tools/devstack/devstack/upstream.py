"""The upstream Kubeflow Trainer manifests for runs from a checkout (``dev``, tests, benchmarks).

The image ships them (its build runs ``hack/get_trainer_manifests.sh``); a checkout has them
only through the same script, which keeps one tree per pinned commit in a cache outside the
repository (``${XDG_CACHE_HOME:-~/.cache}/odh-training-functions/manifests/<commit>``). The
first call fetches that commit, or copies the mirror named by ``TRAINER_MANIFESTS_SOURCE``;
every later call is a directory check. Nothing here looks for the trees anywhere else.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FETCH_SCRIPT = REPO / "hack" / "get_trainer_manifests.sh"
REQUIRED = ("rhoai/kustomization.yaml", "rhoai/params.env", "component_metadata.yaml")


class ManifestsError(RuntimeError):
    """The manifests could not be fetched (offline without a mirror, a bad mirror, ...)."""


def fetch_trainer_manifests(environ: Mapping[str, str] | None = None) -> Path:
    """The cached tree of the pinned commit, fetched first when the cache lacks it."""
    env = dict(os.environ if environ is None else environ)
    if not FETCH_SCRIPT.exists():
        raise ManifestsError(f"{FETCH_SCRIPT} not found: run from a checkout of the project")
    done = subprocess.run(["bash", str(FETCH_SCRIPT), "--cached"], env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ManifestsError(f"{FETCH_SCRIPT.name} failed (exit {done.returncode}):\n"
                             f"{done.stderr[-2000:]}")
    tree = Path(lines[-1])
    missing = [name for name in REQUIRED if not (tree / name).is_file()]
    if missing:
        raise ManifestsError(f"{tree} lacks {', '.join(missing)}")
    return tree


def trainer_manifests(environ: Mapping[str, str] | None = None) -> Path:
    """``TRAINER_MANIFESTS_DIR`` when set (a tree the caller prepared), else the cached tree."""
    env = os.environ if environ is None else environ
    configured = env.get("TRAINER_MANIFESTS_DIR")
    if configured:
        return Path(configured)
    return fetch_trainer_manifests(env)
