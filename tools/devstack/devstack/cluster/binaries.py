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

REPO_ROOT = Path(__file__).resolve().parents[4]
ENSURE_SCRIPT = REPO_ROOT / "hack" / "ensure-testbin.sh"

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BUILD_HINT = (
    "build them with `make testbin` (first build takes a while), or point KUBEBUILDER_ASSETS "
    "at a directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
    "kwok and kwok-stages"
)


class BinariesError(RuntimeError):
    """A binary the local control plane needs is missing or could not be built."""


# Optional groups of ensure-testbin.sh (TESTBIN_EXTRA) and what each provides.
EXTRA_GROUPS: dict[str, tuple[str, ...]] = {
    "training-operator": ("training-operator", "training-operator-crds"),
    "trainer": ("trainer-controller-manager",),
    "jobset": ("jobset-controller-manager", "jobset-config"),
    "promtool": ("promtool",),
}


@cache
def ensure_bin_dir(extra: tuple[str, ...] = ()) -> Path:
    """The directory with every binary (``TESTBIN_DIR`` wins when set), plus what the optional
    groups named in ``extra`` provide (built on first use like the others)."""
    provided = tuple(name for group in extra for name in EXTRA_GROUPS[group])
    preset = os.environ.get("TESTBIN_DIR")
    if preset:
        directory = Path(preset)
        missing = [name for name in provided if not os.access(directory / name, os.X_OK)]
        if missing:
            raise BinariesError(
                f"TESTBIN_DIR={preset} lacks {', '.join(missing)}: assemble it with "
                f"`TESTBIN_EXTRA='{' '.join(extra)}' bash hack/ensure-testbin.sh` "
                "(`make bench` does), or unset TESTBIN_DIR")
    else:
        if not ENSURE_SCRIPT.exists():
            raise BinariesError(f"{ENSURE_SCRIPT} not found; {BUILD_HINT}")
        env = {**os.environ, "TESTBIN_EXTRA": " ".join(extra)} if extra else None
        # Its progress (a line as each group and binary starts and ends, with how long the
        # group's last cold build took) goes straight to our stderr: a cold build takes
        # minutes, which the user sees go by.
        done = subprocess.run(["bash", str(ENSURE_SCRIPT)], stdout=subprocess.PIPE, text=True,
                              check=False, env=env)
        if done.returncode != 0:
            raise BinariesError(
                f"{ENSURE_SCRIPT.name} failed (exit {done.returncode}; its output is above); "
                f"{BUILD_HINT}")
        directory = Path(done.stdout.strip().splitlines()[-1])
    check(directory, (*REQUIRED, *provided))
    return directory


def check(directory: Path, names: tuple[str, ...] = REQUIRED) -> None:
    missing = [name for name in names if not os.access(directory / name, os.X_OK)]
    if missing:
        raise BinariesError(f"missing in {directory}: {', '.join(missing)}; {BUILD_HINT}")
