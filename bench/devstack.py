"""``python -m bench.devstack``: how long ``python -m devstack dev`` takes to be ready with warm
binaries, through the real Knative Eventing and through the emulated Broker (the start-up
phases as the stack times them, medians of repeated starts), and how long each group of
binaries took to build, as ``hack/ensure-testbin.sh`` recorded it when it built the cached
copy (``BUILD-SECONDS`` beside each group; the training-operator group of ``make bench``
included). Writes ``bench/results/devstack.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.stats import summary
from devstack import controllers
from devstack.cluster.binaries import ensure_bin_dir
from devstack.stack import Broker, DevStack
from devstack.upstream import trainer_manifests

RESULTS = Path(__file__).parent / "results"
PHASES = ("cluster", "install", "ready")


def start_once(bin_dir: Path, broker: Broker) -> dict[str, float]:
    """One start of the stack as ``make dev`` does it (the resync at its schedule, the
    upstream Trainer and JobSet controllers run locally)."""
    stack = DevStack(bin_dir, trainer_manifests=trainer_manifests(), broker=broker,
                     upstream_controllers=True, source_filters=True)
    started = time.monotonic()
    try:
        stack.start()
        return {**stack.timings, "total": round(time.monotonic() - started, 2)}
    finally:
        stack.stop()


def build_seconds(bin_dir: Path) -> dict[str, int]:
    """Per build group (e.g. ``kubernetes``, ``knative``), the seconds its cold build took."""
    found: dict[str, int] = {}
    manifest = bin_dir / "MANIFEST"
    for line in manifest.read_text().splitlines() if manifest.exists() else []:
        path = Path(line.partition("=")[2])
        record = path.parent / "BUILD-SECONDS"
        group = path.parent.name.rpartition("-")[0]
        if group and record.exists():
            found[group] = int(record.read_text().strip())
    return dict(sorted(found.items()))


def run(repeats: int = 3) -> dict[str, Any]:
    bin_dir = ensure_bin_dir(controllers.GROUPS)
    result: dict[str, Any] = {"repeats": repeats}
    for broker in ("knative", "emulated"):
        runs = [start_once(bin_dir, broker) for _ in range(repeats)]
        result[broker] = {f"{phase}_s": summary([r[phase] for r in runs], 1)
                          for phase in (*PHASES, "total") if all(phase in r for r in runs)}
    # the benchmarks' extra group too (make bench builds it for the burst's baseline)
    result["build_seconds"] = build_seconds(ensure_bin_dir((*controllers.GROUPS,
                                                             "training-operator")))
    return result


def markdown(result: Mapping[str, Any]) -> str:
    lines = ["# The dev stack's start-up with warm binaries", "",
             f"`python -m bench.devstack`: {result['repeats']} starts of each event path; "
             "seconds from the start: median (min to max).", "",
             "| event path | cluster up | installed | ready |", "| --- | --- | --- | --- |"]
    for broker in ("knative", "emulated"):
        row = result[broker]
        cells = [f"{row[f'{p}_s']['median']} ({row[f'{p}_s']['min']} to {row[f'{p}_s']['max']})"
                 for p in PHASES]
        lines.append(f"| {broker} | {' | '.join(cells)} |")
    lines += ["", "Cold build of each binary group, as recorded when the cache was built:", "",
              "| group | seconds |", "| --- | --- |"]
    lines += [f"| {group} | {seconds} |" for group, seconds in result["build_seconds"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.devstack")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **run(args.repeats)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "devstack.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "devstack.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
