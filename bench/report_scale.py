"""The report of ``bench/scale.py``: a Markdown table per size and a plot of what grows with
the cluster (new replica's first pass, wake-up, memory), ours beside the Go operator's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FUNCTIONS = ("reconcile", "status", "gc")
OURS_COLUMNS = ("ready_s", "first_pass_s", "wake_s", "lists", "list_mib", "rss_mib",
                "resync_s", "resync_requests", "resync_writes", "rewake_s", "rewake_requests",
                "rewake_writes")
GO_COLUMNS = ("synced_s", "first_pass_s", "lists", "list_mib", "rss_mib")


def _go_systems(size: Mapping[str, Any]) -> list[str]:
    return [k for k, v in size.items() if k.startswith("go-") and isinstance(v, Mapping)]


def slope(sizes: Sequence[Mapping[str, Any]], value: str) -> float | None:
    """MiB per 1,000 jobs between the smallest and the largest size."""
    found = [(int(s["jobs"]), float(s[value])) for s in sizes if value in s]
    if len(found) < 2:
        return None
    (small, low), (large, high) = min(found), max(found)
    return round((high - low) / (large - small) * 1000, 1)


def with_totals(sizes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each size with ``ours_rss_mib`` and each Go system's ``<system>_rss_mib`` at the top."""
    out = []
    for size in sizes:
        flat = dict(size)
        for system in _go_systems(size):
            flat[f"{system}_rss_mib"] = size[system]["rss_mib"]
        out.append(flat)
    return out


def markdown(results: Mapping[str, Any], command: str) -> str:
    sizes = with_totals(results["sizes"])
    lines = ["# Scale", "", f"`{command}` ({results['at']}, {results['machine']['cpus']} CPUs).",
             "A new replica into N converged PyTorchJobs (3 pods and 3 Services each), one run "
             "per size; bench/scale.py says what each figure is.", ""]
    for size in sizes:
        lines += [f"## {size['jobs']} jobs (filled in {size['fill_s']} s)", ""]
        present = [f for f in FUNCTIONS if f in size]
        if present:
            lines += ["| ours | " + " | ".join(OURS_COLUMNS) + " |",
                      "|---|" + "---:|" * len(OURS_COLUMNS)]
            lines += [f"| {f} | " + " | ".join(str(size[f].get(c, "")) for c in OURS_COLUMNS)
                      + " |" for f in present]
            lines += ["", f"Summed peak RSS of ours: {size.get('ours_rss_mib')} MiB.", ""]
        for system in _go_systems(size):
            lines += ["| Go | " + " | ".join(GO_COLUMNS) + " |",
                      "|---|" + "---:|" * len(GO_COLUMNS),
                      f"| {system} | " + " | ".join(str(size[system].get(c, ""))
                                                   for c in GO_COLUMNS) + " |", ""]
    def per_thousand(value: str) -> str:
        found = slope(sizes, value)
        return "n/a (one size)" if found is None else f"{found} MiB"

    memory = [f"ours {per_thousand('ours_rss_mib')}"] if any(
        "ours_rss_mib" in s for s in sizes) else []
    memory += [f"{s} {per_thousand(f'{s}_rss_mib')}"
               for s in (_go_systems(sizes[0]) if sizes else [])]
    lines += ["## Memory per 1,000 jobs", "", ", ".join(memory) + " (between the smallest and "
              "the largest size).", ""]
    return "\n".join(lines)


def plot(results: Mapping[str, Any], out: Path) -> Path:
    import matplotlib  # a second of import: only when a plot is made

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = with_totals(results["sizes"])
    jobs = [s["jobs"] for s in sizes]
    panels: list[tuple[str, list[tuple[str, list[float]]]]] = [
        ("new replica: spawn to first correct pass (s)",
         [(f, [s[f]["first_pass_s"] for s in sizes]) for f in FUNCTIONS if f in sizes[0]]
         + [(g, [s[g]["first_pass_s"] for s in sizes]) for g in _go_systems(sizes[0])]),
        ("wake: spawn to every parent passed (s)",
         [(f, [s[f]["wake_s"] for s in sizes]) for f in FUNCTIONS if f in sizes[0]]),
        ("peak RSS once caches are full (MiB)",
         [("ours (summed)", [s.get("ours_rss_mib", 0.0) for s in sizes])]
         + [(g, [s[f"{g}_rss_mib"] for s in sizes]) for g in _go_systems(sizes[0])]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4))
    for axis, (title, series) in zip(axes, panels, strict=True):
        for label, values in series:
            axis.plot(jobs, values, marker="o", label=label)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("jobs")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
