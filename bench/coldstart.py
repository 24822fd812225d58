"""Image-equivalent cold start: the Dockerfile's command, from compiled bytecode.

``python -m bench.coldstart [--repeats N]`` prints JSON. What runs is the image's ENTRYPOINT +
CMD (``python -m functions serve all``) with the image's ENV, against a copy of the package
compiled the way the image build compiles it (``compileall --invalidation-mode
unchecked-hash``) and with ``PYTHONDONTWRITEBYTECODE`` set, from a directory outside the
repository, so nothing is compiled at start-up: what a fresh pod pays once the image is
pulled. The kubeconfig names an unused port (creating the client never contacts it) and the
event measured is one no controller handles, so no API server is involved.

* ``spawn_to_ready_s``: spawned -> first 200 on ``/health/readiness`` (every controller
  loaded and the API client built);
* ``spawn_to_first_event_s``: spawned -> first 202 for a CloudEvent;
* ``without_bytecode``: the same with an uncompiled copy, to show what the compile step saves;
* ``baseline_minimal_flask_spawn_to_ready_s``: gunicorn serving a five-line Flask app, to tell
  this machine's speed and load apart from the package's cost (with ``load_average``).

Target (issue 6): ``spawn_to_ready_s`` median <= 0.6 s.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import py_compile
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.runtime import (
    FOREIGN_EVENT,
    MINIMAL_APP,
    _kubeconfig,
    _sample,
    time_to_ready_and_event,
)
from bench.runtime import cold_start as gunicorn_cold_start
from devstack.cluster.ports import free_port
from tests.deploy.support import dockerfile_command, local_command_env

REPO = Path(__file__).resolve().parents[1]
TARGET_READY_S = 0.6


def prepare(directory: Path, compiled: bool) -> Path:
    """A copy of the package under ``directory/site``, compiled as the image build does."""
    site = directory / "site"
    shutil.copytree(REPO / "functions", site / "functions",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if compiled:
        compileall.compile_dir(site, quiet=1, workers=0,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return site


def image_env(site: Path, kubeconfig: Path, port: int) -> dict[str, str]:
    stage, _ = dockerfile_command()
    env = local_command_env(stage, Path(sys.executable).parent, os.environ)
    env.update(PYTHONPATH=str(site), KUBECONFIG=str(kubeconfig), PORT=str(port),
               PYTHONDONTWRITEBYTECODE="1")
    return env


def check_imports_from(site: Path, env: dict[str, str]) -> None:
    """The spawned interpreter must load the prepared copy, not the repository."""
    where = subprocess.run([sys.executable, "-c", "import functions; print(functions.__file__)"],
                           cwd=site.parent, env=env, capture_output=True, text=True,
                           check=True, timeout=60).stdout.strip()
    if not where.startswith(str(site)):
        raise RuntimeError(f"functions imported from {where}, not from {site}")


def cold_start(site: Path, kubeconfig: Path) -> dict[str, float]:
    _, command = dockerfile_command()
    port = free_port()
    env = image_env(site, kubeconfig, port)
    headers, body = _sample(FOREIGN_EVENT)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=site.parent, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        ready, event = time_to_ready_and_event(process, port, headers, body, started)
        return {"ready": ready, "event": event}
    finally:
        process.terminate()
        process.wait(timeout=30)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


def measure(compiled: bool, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="coldstart-") as scratch:
        directory = Path(scratch)
        site = prepare(directory, compiled)
        kubeconfig = _kubeconfig(directory)
        check_imports_from(site, image_env(site, kubeconfig, 0))
        cold_start(site, kubeconfig)  # warm the OS page cache, as a pulled image would be
        runs = [cold_start(site, kubeconfig) for _ in range(repeats)]
    return {"spawn_to_ready_s": summary([r["ready"] for r in runs]),
            "spawn_to_first_event_s": summary([r["event"] for r in runs])}


def baseline(repeats: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="coldstart-baseline-") as scratch:
        directory = Path(scratch)
        (directory / "minimal_app.py").write_text(MINIMAL_APP)
        env = {**os.environ, "APP_DIR": str(directory),
               "KUBECONFIG": str(_kubeconfig(directory))}
        gunicorn_cold_start(env, ["minimal_app:app"])
        return summary([gunicorn_cold_start(env, ["minimal_app:app"])["ready"]
                        for _ in range(repeats)])


def run(repeats: int = 5) -> dict[str, Any]:
    _, command = dockerfile_command()
    compiled = measure(True, repeats)
    results: dict[str, Any] = {
        "command": command,
        **compiled,
        "target_ready_s": TARGET_READY_S,
        "meets_target": compiled["spawn_to_ready_s"]["median"] <= TARGET_READY_S,
        "without_bytecode": measure(False, repeats),
        "baseline_minimal_flask_spawn_to_ready_s": baseline(repeats),
        "load_average": round(os.getloadavg()[0], 2),
    }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coldstart")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
