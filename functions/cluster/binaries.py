"""Find the control-plane binaries, building them on first use.

``hack/ensure-testbin.sh`` does the work (it honours ``KUBEBUILDER_ASSETS`` and
``TEST_ASSET_*``, builds missing groups from the pinned Go wrapper modules and caches them
outside the repository); this module runs it once per process and checks the result.
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENSURE_SCRIPT = REPO_ROOT / "hack" / "ensure-testbin.sh"

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BUILD_HINT = (
    "build them with `make testbin` (first build takes a while), or point KUBEBUILDER_ASSETS "
    "at a directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
    "kwok and kwok-stages"
)


class BinariesError(RuntimeError):
    """A binary the local control plane needs is missing or could not be built."""


@cache
def ensure_bin_dir() -> Path:
    """The directory with every binary (``TESTBIN_DIR`` wins when set)."""
    preset = os.environ.get("TESTBIN_DIR")
    if preset:
        directory = Path(preset)
    else:
        if not ENSURE_SCRIPT.exists():
            raise BinariesError(f"{ENSURE_SCRIPT} not found; {BUILD_HINT}")
        done = subprocess.run(["bash", str(ENSURE_SCRIPT)], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise BinariesError(
                f"{ENSURE_SCRIPT.name} failed (exit {done.returncode}):\n"
                f"{done.stderr[-3000:]}\n{BUILD_HINT}")
        directory = Path(done.stdout.strip().splitlines()[-1])
    check(directory)
    return directory


def check(directory: Path, names: tuple[str, ...] = REQUIRED) -> None:
    missing = [name for name in names if not os.access(directory / name, os.X_OK)]
    if missing:
        raise BinariesError(f"missing in {directory}: {', '.join(missing)}; {BUILD_HINT}")
