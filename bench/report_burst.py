"""The burst suite as people compare it: one row per system and size (T, all Running, every
Event written, CPU, memory, requests per job, jobs that never got there) and one PNG with the
times, the controller CPU and the requests per job side by side. The generic per-figure table of
``bench.report`` follows it with every figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import burst_functions

COLUMNS = ("system", "T: created (s)", "all pods Running (s)", "all Running (s)",
           "Events written (s)",
           "controller CPU to T / end (s)",
           "peak RSS (MiB)", "requests/job", "by verb", "not created / not Running", "runs")


def sizes(result: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """``(jobs, {system: summary})`` for every size run, smallest first."""
    found = [(int(key.split("_", 1)[1]), value) for key, value in result.items()
             if key.startswith("jobs_") and isinstance(value, Mapping)]
    return sorted(found, key=lambda item: item[0])


def _fig(summary: Mapping[str, Any], name: str) -> str:
    figure = summary.get(name)
    if not isinstance(figure, Mapping):
        return "n/a"
    text = f"{figure['median']:g}"
    if figure.get("n", 1) > 1 and figure["min"] != figure["max"]:
        text += f" ({figure['min']:g}-{figure['max']:g})"
    return text


def _verbs(summary: Mapping[str, Any]) -> str:
    by_verb = (summary.get("controller_requests_per_job") or {}).get("by_verb") or {}
    return ", ".join(f"{name.removesuffix('_requests')} {figure['median']:g}"
                     for name, figure in by_verb.items()) or "n/a"


def row(system: str, summary: Mapping[str, Any]) -> list[str]:
    name = system
    if "best_threads" in summary:
        name += f" (best of sweep: {summary['best_threads']} threads)"
    has_process = bool((summary.get("controller_peak_rss_mib") or {}).get("max"))
    cpu = (f"{_fig(summary, 'controller_cpu_s_at_created')} / "
           f"{_fig(summary, 'controller_cpu_s_at_end')}") if has_process else "n/a"
    requests = (summary.get("controller_requests_per_job") or {}).get("total_requests") or {}
    missing = (f"{_fig(summary, 'jobs_not_created')} / {_fig(summary, 'jobs_not_running')}")
    return [name, _fig(summary, "created_s"), _fig(summary, "pods_running_s"),
            _fig(summary, "running_s"),
            _fig(summary, "settled_s"), cpu,
            _fig(summary, "controller_peak_rss_mib") if has_process else "n/a",
            _fig({"r": requests}, "r"), _verbs(summary), missing,
            f"{summary.get('runs', 0)} ({summary.get('runs_timed_out', 0)} timed out)"]


def markdown_lines(result: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for jobs, systems in sizes(result):
        lines += [f"### {jobs} jobs", "", "| " + " | ".join(COLUMNS) + " |",
                  "|" + "---|" * len(COLUMNS)]
        for system, summary in systems.items():
            if isinstance(summary, Mapping):
                lines.append("| " + " | ".join(row(system, summary)) + " |")
        for system, summary in systems.items():
            if isinstance(summary, Mapping) and event_path_parts(summary):
                lines += ["", f"{system}: event path CPU to T by part (s): "
                          + ", ".join(f"{part} {value:g}"
                                      for part, value in event_path_parts(summary)) + "."]
        for system, summary in systems.items():
            if isinstance(summary, Mapping) and summary.get("function_figures"):
                lines += ["", functions_line(system, summary, jobs)]
        lines += clusters_line(systems)
        limit = systems.get("limit")
        if isinstance(limit, Mapping) and isinstance(limit.get("sweep"), Mapping):
            points = ", ".join(f"{key.removeprefix('threads_')} threads: "
                               f"{_fig(point, 'created_s')} s"
                               for key, point in limit["sweep"].items())
            lines += ["", f"Limit sweep (T by create-loop concurrency): {points}."]
        lines.append("")
    return lines


def functions_line(system: str, summary: Mapping[str, Any], jobs: int) -> str:
    """Each function's deliveries per job and the wall time its handlers ran (medians)."""
    figures = burst_functions.per_job(summary["function_figures"], jobs)
    return (f"{system}: deliveries per job / handler time (s), by function: "
            + ", ".join(f"{function} {f.get('deliveries', 0):g} / {f.get('handler_s', 0):g}"
                        for function, f in figures.items()) + ".")


def clusters_line(systems: Mapping[str, Any]) -> list[str]:
    """Which kube-controller-manager controllers, beyond the local cluster's defaults, each
    system's cluster ran (results from before it was recorded ran none)."""
    by_set: dict[str, list[str]] = {}
    for system, summary in systems.items():
        if isinstance(summary, Mapping):
            by_set.setdefault(str(summary.get("cluster_controllers") or ""), []).append(system)
    parts = [f"{', '.join(names)}: " + (extra.replace(",", ", ") if extra else "none")
             for extra, names in sorted(by_set.items(), key=lambda item: item[0], reverse=True)]
    return ["", "Controllers beyond the local cluster's defaults: " + "; ".join(parts) + "."]


PART_PREFIX, PART_SUFFIX = "event_path_cpu_s.", "_at_created"


def event_path_parts(summary: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The event path's CPU to T by part (median), largest first."""
    found = [(key[len(PART_PREFIX):-len(PART_SUFFIX)], figure["median"])
             for key, figure in summary.items()
             if key.startswith(PART_PREFIX) and key.endswith(PART_SUFFIX)
             and isinstance(figure, Mapping)]
    return sorted(found, key=lambda item: (-item[1], item[0]))


def plot(result: Mapping[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = sizes(result)
    panels = (("times (s)", ("created_s", "running_s")),
              ("controller CPU to end (s)", ("controller_cpu_s_at_end",)),
              ("controller requests per job", ("total_requests",)))
    fig, axes = plt.subplots(len(found), len(panels), squeeze=False,
                             figsize=(4.2 * len(panels), 0.6 + 2.6 * len(found)))
    for axis_row, (jobs, systems) in zip(axes, found, strict=True):
        names = [s for s, v in systems.items() if isinstance(v, Mapping)]
        for axis, (title, keys) in zip(axis_row, panels, strict=True):
            width = 0.8 / len(keys)
            for offset, key in enumerate(keys):
                figures = [_lookup(systems[s], key) for s in names]
                positions = [i + offset * width for i in range(len(names))]
                medians = [f["median"] if f else 0.0 for f in figures]
                errors = [[f["median"] - f["min"] if f else 0.0 for f in figures],
                          [f["max"] - f["median"] if f else 0.0 for f in figures]]
                axis.barh(positions, medians, height=width, xerr=errors, capsize=3,
                          label=key.removesuffix("_s"))
            axis.set_yticks([i + (len(keys) - 1) * width / 2 for i in range(len(names))],
                            names, fontsize=8)
            axis.invert_yaxis()
            axis.set_title(f"{jobs} jobs: {title}", fontsize=9)
            axis.grid(axis="x", alpha=0.3)
            if len(keys) > 1:
                axis.legend(fontsize=7)
    fig.suptitle("burst: median, whiskers min-max")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _lookup(summary: Mapping[str, Any], key: str) -> Mapping[str, float] | None:
    if key == "total_requests":
        summary = summary.get("controller_requests_per_job") or {}
    figure = summary.get(key)
    return figure if isinstance(figure, Mapping) and "median" in figure else None
