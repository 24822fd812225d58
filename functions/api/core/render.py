"""Text views of jobs for the CLI: a table for ``list`` and the live ``watch`` frame.

Pure functions of API answers (plain dicts) and the current time, so the views are tested
without a terminal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
FINISHED = ("Succeeded", "Failed")
BAR_WIDTH = 20


def _age(since: str | None, now: datetime) -> str:
    if not since:
        return "-"
    try:
        then = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int((now - then.astimezone(UTC)).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def totals(job: Obj) -> tuple[int, int, int, int]:
    """(desired, active, succeeded, failed) over every replica type."""
    desired = active = succeeded = failed = 0
    for counts in (job.get("replicas") or {}).values():
        desired += int(counts.get("desired") or 0)
        active += int(counts.get("active") or 0)
        succeeded += int(counts.get("succeeded") or 0)
        failed += int(counts.get("failed") or 0)
    return desired, active, succeeded, failed


def _queue_column(job: Obj) -> str:
    info = job.get("queue") or {}
    if info.get("position"):
        return f"#{info['position']} p{info.get('priority', 0)}"
    if info.get("admission") == "kueue":
        return f"kueue:{info.get('name')}"
    return "-"


def table(jobs: list[Obj], now: datetime) -> str:
    header = ("NAME", "FRAMEWORK", "STATE", "QUEUE", "REPLICAS", "AGE")
    rows = [header]
    for job in jobs:
        desired, active, succeeded, _ = totals(job)
        rows.append((str(job.get("name")), str(job.get("framework")), str(job.get("state")),
                     _queue_column(job), f"{active + succeeded}/{desired}",
                     _age(job.get("createdAt"), now)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
                     for row in rows)


def bar(done: int, running: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[####>>>.....]``: finished replicas, running replicas, the rest."""
    if total <= 0:
        return "[" + "." * width + "]"
    full = min(width, round(width * done / total))
    active = min(width - full, round(width * running / total))
    return "[" + "#" * full + ">" * active + "." * (width - full - active) + "]"


def details(job: Obj, now: datetime) -> str:
    """One job in full: state, queue, replica bars, conditions."""
    lines = [f"{job.get('name')}  {job.get('kind')}  {job.get('state')}"]
    info = job.get("queue") or {}
    if info.get("admission") != "none":
        position = f", position {info['position']}" if info.get("position") else ""
        lines.append(f"  queue {info.get('name')} ({info.get('admission')}), priority "
                     f"{info.get('priority', 0)}{position}")
    lines.append(f"  created {_age(job.get('createdAt'), now)} ago, started "
                 f"{job.get('startTime') or '-'}, completed {job.get('completionTime') or '-'}")
    for replica_type, counts in (job.get("replicas") or {}).items():
        desired = int(counts.get("desired") or 0)
        active, succeeded = int(counts.get("active") or 0), int(counts.get("succeeded") or 0)
        failed = int(counts.get("failed") or 0)
        lines.append(f"  {replica_type:<10} {bar(succeeded, active, desired)} "
                     f"{active} running, {succeeded} done, {failed} failed of {desired}")
    for cond in job.get("conditions") or []:
        lines.append(f"  - {cond.get('type')}={cond.get('status')} {cond.get('reason', '')}: "
                     f"{cond.get('message', '')}")
    return "\n".join(lines)


def watch_frame(jobs: list[Obj], namespace: str, now: datetime, missing: list[str]) -> str:
    """The whole screen of one ``watch`` refresh."""
    done = sum(1 for j in jobs if j.get("state") in FINISHED)
    lines = [f"training jobs in {namespace}: {done}/{len(jobs)} finished  "
             f"({now.strftime('%H:%M:%S')})", ""]
    for job in jobs:
        lines.append(details(job, now))
        lines.append("")
    lines.extend(f"{name}: not found" for name in missing)
    return "\n".join(lines).rstrip() + "\n"


def all_finished(jobs: list[Obj]) -> bool:
    return bool(jobs) and all(j.get("state") in FINISHED for j in jobs)
