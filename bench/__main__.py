"""``python -m bench [--quick] [--only NAME ...] [--burst-systems A,B] [--burst-no-large |
--burst-large-only] [--merge] [--out DIR]``: run the benchmarks and write ``latest.json``,
``latest.md`` (a Markdown table) and one PNG plot per suite to ``bench/results/`` (or ``DIR``).
Every figure is a median over repeated runs with min and max.

``--merge`` keeps the figures of ``latest.json`` that this run does not measure (e.g. one new
system of the burst, ``--only burst --burst-systems ours-knative --merge``) and lists the run
under ``updates``, so the report says which command produced what. A run that measures
suites whole (``--only burst --merge``) replaces every figure of the earlier updates of those
suites alone, so they leave the list.
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
    parser.add_argument("--burst-systems", default=None,
                        help="comma-separated systems of the burst suite (default: all)")
    parser.add_argument("--burst-no-large", action="store_true",
                        help="the burst suite at its first size only (no 1,000-job run)")
    parser.add_argument("--burst-large-only", action="store_true",
                        help="the burst suite at its 1,000-job size only")
    parser.add_argument("--merge", action="store_true",
                        help="merge into the existing latest.json instead of replacing it")
    args = parser.parse_args(argv)
    options: dict[str, dict[str, Any]] = {
        name: dict(QUICK.get(name, {})) if args.quick else {} for name in SUITES}
    if args.burst_systems:
        options["burst"]["systems"] = tuple(
            s.strip() for s in args.burst_systems.split(",") if s.strip())
    if args.burst_no_large and args.burst_large_only:
        parser.error("--burst-no-large and --burst-large-only leave nothing to run")
    if args.burst_no_large:
        options["burst"]["burst"] = 0
    if args.burst_large_only:
        options["burst"]["repeats"] = 0
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": _cpus(), "python": platform.python_version()},
        "quick": args.quick,
    }
    for name in args.only:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        results[name] = module.run(**options[name])
        results[name]["suite_seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(results[name], indent=2), file=sys.stderr, flush=True)
    command = "python -m bench" + (" --quick" if args.quick else "") + (
        f" --only {' '.join(args.only)}" if list(args.only) != list(SUITES) else "") + (
        f" --burst-systems {args.burst_systems}" if args.burst_systems else "") + (
        " --burst-no-large" if args.burst_no_large else "") + (
        " --burst-large-only" if args.burst_large_only else "")
    args.out.mkdir(parents=True, exist_ok=True)
    latest = args.out / "latest.json"
    if args.merge and latest.exists():
        base = json.loads(latest.read_text())
        update = {"when": results["when"], "command": command + " --merge"}
        results = merge(base, {k: v for k, v in results.items() if k in SUITES})
        if "burst" in base and "burst" in results and args.burst_systems:
            ran = [*str(base["burst"].get("systems", "")).split(","),
                   *options["burst"]["systems"]]
            results["burst"]["systems"] = ",".join(dict.fromkeys(s for s in ran if s))
        results["updates"] = [*superseded_left_out(base.get("updates", []), update["command"]),
                              update]
        command = base.get("command", "python -m bench")
    else:
        results["command"] = command
    latest.write_text(json.dumps(results, indent=2) + "\n")
    for path in write_report(results, args.out, command):
        print(path, file=sys.stderr)
    print(json.dumps(results, indent=2))
    return 0


def measured(command: str) -> tuple[frozenset[str], bool]:
    """The suites a ``python -m bench`` command measured, and whether it measured each whole
    (full sizes, every system and size of the burst)."""
    words = command.split()
    suites: set[str] = set(SUITES)
    if "--only" in words:
        named = words[words.index("--only") + 1:]
        suites = set(named[:next((i for i, w in enumerate(named) if w.startswith("--")),
                                 len(named))])
    partial = ("--quick", "--burst-systems", "--burst-no-large", "--burst-large-only")
    return frozenset(suites), not any(word in words for word in partial)


def burst_systems(command: str) -> frozenset[str] | None:
    """The burst systems a ``python -m bench`` command named (``None``: every one)."""
    words = command.split()
    if "--burst-systems" not in words:
        return None
    return frozenset(words[words.index("--burst-systems") + 1].split(","))


def superseded_left_out(updates: list[dict[str, Any]], command: str) -> list[dict[str, Any]]:
    """The earlier updates that still name figures of the report: those of suites that
    ``command`` measured whole are all replaced, so the report no longer lists them."""
    suites, whole = measured(command)
    if not whole:
        return list(updates)
    return [u for u in updates if not measured(str(u.get("command", "")))[0] <= suites]


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``new`` laid over it: mappings merged key by key, anything else
    replaced."""
    merged = dict(base)
    for key, value in new.items():
        old = merged.get(key)
        merged[key] = (merge(old, value) if isinstance(old, dict) and isinstance(value, dict)
                       else value)
    return merged


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
