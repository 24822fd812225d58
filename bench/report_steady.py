"""The report of ``bench/steady.py``: a Markdown table per arrival rate (latency percentiles,
jobs never seen, CPU and memory, each system beside the others) and the latency distributions
as a plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    ("jobs", "jobs"),
    ("pods p50 / p95 / p99 (s)", "pods_s"),
    ("Running p50 / p95 / p99 (s)", "running_s"),
    ("never pods / Running", "missing"),
    ("late creates", "late_creates"),
    ("controller CPU s (per job)", "controller_cpu_s"),
    ("event path CPU s", "event_path_cpu_s"),
    ("API server CPU s", "apiserver_cpu_s"),
    ("controller peak RSS MiB", "controller_peak_rss_mib"),
)


def _cell(run: Mapping[str, Any], key: str) -> str:
    if key in ("pods_s", "running_s"):
        found = run.get(key) or {}
        return " / ".join("never" if found.get(p) is None else f"{found[p]:g}"
                          for p in ("p50", "p95", "p99"))
    if key == "missing":
        return f"{run.get('jobs_without_pods', 0)} / {run.get('jobs_not_running', 0)}"
    if key == "controller_cpu_s":
        return f"{run.get(key, 0):g} ({run.get(f'{key}_per_job', 0):g})"
    return str(run.get(key, ""))


def rates(results: Mapping[str, Any]) -> list[float]:
    return sorted({float(r["rate"]) for r in results["runs"]})


def against(results: Mapping[str, Any], rate: float, system: str, other: str,
            percentile: str = "p99") -> float | None:
    """``system``'s create-to-pods ``percentile`` minus ``other``'s at ``rate`` (seconds), or
    ``None`` when either was never reached or not run."""
    found = {r["system"]: r for r in results["runs"] if float(r["rate"]) == rate}
    if system not in found or other not in found:
        return None
    mine, theirs = found[system]["pods_s"].get(percentile), found[other]["pods_s"].get(
        percentile)
    return None if mine is None or theirs is None else round(mine - theirs, 2)


def markdown(results: Mapping[str, Any], command: str) -> str:
    lines = ["# Steady arrivals", "",
             f"`{command}` ({results['at']}, {results['machine']['cpus']} CPUs). Jobs created "
             "at a fixed rate on a fresh cluster per run; latencies from the job stored to all "
             "its pods created and to its Running condition; bench/steady.py says what each "
             "figure is.", ""]
    for rate in rates(results):
        runs = [r for r in results["runs"] if float(r["rate"]) == rate]
        seconds = runs[0]["seconds"]
        lines += [f"## {rate:g} jobs per second for {seconds:g} s", "",
                  "| system | " + " | ".join(title for title, _ in COLUMNS) + " |",
                  "|---|" + "---:|" * len(COLUMNS)]
        lines += [f"| {r['system']} | " + " | ".join(_cell(r, key) for _, key in COLUMNS)
                  + " |" for r in runs]
        gap = against(results, rate, "ours", "go-tuned")
        if gap is not None:
            lines += ["", f"ours' p99 create to pods minus go-tuned's: {gap:+g} s."]
        lines.append("")
    return "\n".join(lines)


def _cdf(values: Sequence[float | None]) -> tuple[list[float], list[float]]:
    total = len(values)
    seen = sorted(v for v in values if v is not None)
    return seen, [(i + 1) / total for i in range(len(seen))]


def plot(results: Mapping[str, Any], out: Path) -> Path:
    import matplotlib  # a second of import: only when a plot is made

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = rates(results)
    metrics = (("pods_s", "stored to all pods (s)"), ("running_s", "stored to Running (s)"))
    fig, axes = plt.subplots(len(found), len(metrics), figsize=(9.0, 3.2 * len(found)),
                             squeeze=False)
    for row, rate in enumerate(found):
        for column, (metric, title) in enumerate(metrics):
            axis = axes[row][column]
            for run in (r for r in results["runs"] if float(r["rate"]) == rate):
                xs, ys = _cdf(run["samples"][metric])
                axis.step(xs, ys, where="post", label=run["system"])
            axis.set_title(f"{rate:g}/s: {title}", fontsize=9)
            axis.set_xscale("symlog", linthresh=1.0)
            axis.set_ylabel("fraction of jobs")
            axis.set_ylim(0, 1.02)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
