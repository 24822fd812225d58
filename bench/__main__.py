"""``python -m bench [--quick] [--only NAME ...] [--out DIR]``: run the benchmarks and write
``latest.json``, ``latest.md`` (a Markdown table) and one PNG plot per suite to
``bench/results/`` (or ``DIR``). Every figure is a median over repeated runs with min and max.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench.burst import QUICK as BURST_QUICK
from bench.report import write_report

RESULTS = Path(__file__).parent / "results"
SUITES = ("runtime", "cluster", "trainer", "jobs", "resync", "throughput", "coldburst", "burst")
# Small sizes for the CI smoke run: figures are printed, never asserted.
QUICK: dict[str, dict[str, Any]] = {
    "runtime": {"repeats": 3, "iterations": 200},
    "cluster": {"repeats": 1},
    "trainer": {"repeats": 1},
    "jobs": {"repeats": 1, "jobs": 10, "burst": None},
    "resync": {"repeats": 2, "jobs": 20},
    "throughput": {"repeats": 2, "events": 200, "jobs": 5, "replicas": (1, 2)},
    "coldburst": {"repeats": 1, "jobs": 10, "down": 1.0},
    "burst": BURST_QUICK,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    parser.add_argument("--only", nargs="*", choices=SUITES, default=list(SUITES))
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": _cpus(), "python": platform.python_version()},
        "quick": args.quick,
    }
    for name in args.only:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        results[name] = module.run(**(QUICK.get(name, {}) if args.quick else {}))
        results[name]["suite_seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(results[name], indent=2), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    command = "python -m bench" + (" --quick" if args.quick else "") + (
        f" --only {' '.join(args.only)}" if list(args.only) != list(SUITES) else "")
    for path in write_report(results, args.out, command):
        print(path, file=sys.stderr)
    print(json.dumps(results, indent=2))
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
