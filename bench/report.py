"""Turn ``latest.json`` into what people read: ``latest.md`` (one Markdown table per suite:
median, min, max, runs) and one PNG per suite (each figure's median as a bar with a min-max
whisker; figures of one unit share a panel so their scales compare).

``python -m bench.report [RESULTS_DIR]`` rewrites both from the JSON already there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import report_burst
from bench.stats import Figure, figures, is_figure

RESULTS = Path(__file__).parent / "results"
UNITS = (("_per_s", "1/s"), ("_ms", "ms"), ("_s", "s"), ("_mib", "MiB"), ("ratio", "x"),
         ("requests", "requests"), ("reads", "requests"), ("writes", "writes"),
         ("passes", "passes"))


def unit_of(name: str) -> str:
    leaf = name.rsplit(".", 1)[-1]
    for suffix, unit in UNITS:
        if leaf.endswith(suffix) or suffix in leaf:
            return unit
    return ""


def _number(value: float) -> str:
    if value == int(value) and abs(value) >= 10:
        return f"{int(value)}"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def markdown(results: Mapping[str, Any], command: str) -> str:
    lines = [f"# Benchmark results ({results.get('when', '')})", "",
             f"Produced by `{command}` on {results.get('machine', {}).get('cpus', '?')} CPUs, "
             f"Python {results.get('machine', {}).get('python', '?')}"
             f"{' (quick smoke sizes)' if results.get('quick') else ''}. "
             "Each figure is the median of its runs, with the min and max.", ""]
    for update in results.get("updates") or []:
        lines += [f"Updated by `{update.get('command')}` ({update.get('when')}): the figures "
                  "it measured replace those of the first run.", ""]
    for suite, result in results.items():
        if not isinstance(result, Mapping) or suite == "machine":
            continue
        found = list(figures(result))
        if not found:
            continue
        lines += [f"## {suite}", ""]
        if suite == "burst":
            lines += report_burst.markdown_lines(result)
        lines += ["| figure | median | min | max | runs | unit |", "|---|---:|---:|---:|---:|---|"]
        for name, figure in found:
            lines.append(f"| {name} | {_number(figure['median'])} | {_number(figure['min'])} "
                         f"| {_number(figure['max'])} | {int(figure.get('n', 1))} "
                         f"| {unit_of(name)} |")
        notes = {k: v for k, v in result.items() if not isinstance(v, Mapping)}
        if notes:
            lines += ["", "Settings: " + ", ".join(f"{k}={v}" for k, v in notes.items())]
        details = _detail_lines(result)
        if details:
            lines += ["", *details]
        lines.append("")
    return "\n".join(lines)


def _detail_lines(result: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Nested values that are not figures (e.g. request counts by verb), one line each."""
    found: list[str] = []
    for key, value in result.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if not isinstance(value, Mapping) or is_figure(value):
            continue
        plain = {k: v for k, v in value.items() if not isinstance(v, Mapping)}
        if plain and not prefix:
            found.append(f"- {name}: " + ", ".join(f"{k}={v}" for k, v in plain.items()))
        elif plain:
            found.append(f"- {name}: {json.dumps(plain)}")
        found.extend(_detail_lines(value, name))
    return found


def plot(suite: str, found: list[tuple[str, Figure]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_unit: dict[str, list[tuple[str, Figure]]] = {}
    for name, figure in found:
        by_unit.setdefault(unit_of(name) or "value", []).append((name, figure))
    fig, axes = plt.subplots(len(by_unit), 1, squeeze=False,
                             figsize=(9, 1.2 + sum(0.45 * len(v) + 0.8 for v in by_unit.values())),
                             gridspec_kw={"height_ratios": [len(v) + 1 for v in by_unit.values()]})
    for axis, (unit, items) in zip(axes[:, 0], by_unit.items(), strict=True):
        labels = [name for name, _ in items]
        medians = [f["median"] for _, f in items]
        low = [f["median"] - f["min"] for _, f in items]
        high = [f["max"] - f["median"] for _, f in items]
        positions = list(range(len(items)))
        axis.barh(positions, medians, xerr=[low, high], color="#4c78a8", ecolor="#222222",
                  capsize=4)
        axis.set_yticks(positions, labels, fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel(unit)
        axis.grid(axis="x", alpha=0.3)
        for position, (_, figure) in zip(positions, items, strict=True):
            axis.annotate(_number(figure["median"]), (figure["max"], position), xytext=(6, -3),
                          textcoords="offset points", fontsize=7)
        top = max(f["max"] for _, f in items)
        axis.set_xlim(0, top * 1.15 if top > 0 else 1)
    fig.suptitle(f"{suite}: median, whiskers min-max")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_report(results: Mapping[str, Any], directory: Path = RESULTS,
                 command: str = "make bench") -> list[Path]:
    """Write ``latest.md`` and ``<suite>.png`` per suite with figures; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "latest.md"]
    written[0].write_text(markdown(results, command))
    for suite, result in results.items():
        if isinstance(result, Mapping) and suite != "machine":
            found = list(figures(result))
            if suite == "burst" and report_burst.sizes(result):
                written.append(report_burst.plot(result, directory / f"{suite}.png"))
            elif found:
                written.append(plot(suite, found, directory / f"{suite}.png"))
    return written


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    results = json.loads((directory / "latest.json").read_text())
    for path in write_report(results, directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
