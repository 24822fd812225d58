"""``python -m bench [--quick] [--only NAME ...]``: run the benchmarks and write
``bench/results/latest.json``."""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
SUITES = ("runtime", "cluster", "jobs", "coldstart", "api")
# Small sizes for the CI smoke run: figures are printed, never asserted.
QUICK: dict[str, dict[str, int]] = {
    "runtime": {"repeats": 3, "iterations": 200},
    "cluster": {"repeats": 1},
    "jobs": {"repeats": 1, "jobs": 10},
    "api": {"repeats": 1, "requests": 20},
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (CI smoke)")
    parser.add_argument("--only", nargs="*", choices=SUITES, default=list(SUITES))
    args = parser.parse_args()
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": _cpus(), "python": platform.python_version()},
        "quick": args.quick,
    }
    for name in args.only:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}", file=sys.stderr, flush=True)
        results[name] = module.run(**(QUICK.get(name, {}) if args.quick else {}))
        print(json.dumps(results[name], indent=2), file=sys.stderr, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
