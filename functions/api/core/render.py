"""What the CLI prints: tables for ``list`` (``-o wide`` with more columns, a NAMESPACE column
with ``-A``), one job in full for ``get``, the live ``watch`` frame, the job documents as JSON
or YAML, ``kind.group/name`` references as kubectl's ``-o name`` prints them, and problems as
one line.

Pure functions of the API's job views (plain dicts, the same in both of the CLI's modes) and
the current time, so the views are tested without a terminal or a cluster.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import yaml

from functions.api.core import kinds

Obj = dict[str, Any]
FINISHED = ("Succeeded", "Failed")
BAR_WIDTH = 20
# The -o values and what each prints.
FORMATS = ("text", "wide", "json", "yaml", "name")


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
    if job.get("state") == "Queued":  # a view without a position (read from the CR directly)
        return f"queued p{info.get('priority', 0)}"
    return "-"


def _reason(job: Obj) -> str:
    """The reason of the job's latest true condition: why it is where it is."""
    true = [c for c in job.get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1].get("reason") or "-") if true else "-"


def table(jobs: list[Obj], now: datetime, *, wide: bool = False,
          namespaces: bool = False) -> str:
    """One row per job; ``wide`` adds KIND, PRIORITY, FAILED (replicas) and REASON,
    ``namespaces`` (``-A``) a NAMESPACE column first, as kubectl's tables."""
    header = ["NAME", "FRAMEWORK", "STATE", "QUEUE", "REPLICAS", "AGE"]
    if wide:
        header += ["KIND", "PRIORITY", "FAILED", "REASON"]
    if namespaces:
        header.insert(0, "NAMESPACE")
    rows = [header]
    for job in jobs:
        desired, active, succeeded, failed = totals(job)
        row = [str(job.get("name")), str(job.get("framework")), str(job.get("state")),
               _queue_column(job), f"{active + succeeded}/{desired}",
               _age(job.get("createdAt"), now)]
        if wide:
            row += [str(job.get("kind")), str((job.get("queue") or {}).get("priority", 0)),
                    str(failed), _reason(job)]
        if namespaces:
            row.insert(0, str(job.get("namespace")))
        rows.append(row)
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


def details(job: Obj, now: datetime, *, namespaced: bool = False) -> str:
    """One job in full: state, queue, replica bars, conditions (``namespaced``: its name as
    ``namespace/name``)."""
    name = f"{job.get('namespace')}/{job.get('name')}" if namespaced else job.get("name")
    lines = [f"{name}  {job.get('kind')}  {job.get('state')}"]
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


def watch_frame(jobs: list[Obj], namespace: str | None, now: datetime, missing: list[str],
                *, wide: bool = False) -> str:
    """The whole screen of one ``watch`` refresh: every job in full, or the wide table
    (``wide``); ``namespace`` ``None`` for every namespace (``-A``)."""
    done = sum(1 for j in jobs if j.get("state") in FINISHED)
    where = namespace if namespace is not None else "all namespaces"
    lines = [f"training jobs in {where}: {done}/{len(jobs)} finished  "
             f"({now.strftime('%H:%M:%S')})", ""]
    if wide:
        lines += [table(jobs, now, wide=True, namespaces=namespace is None), ""]
    else:
        for job in jobs:
            lines.append(details(job, now, namespaced=namespace is None))
            lines.append("")
    lines.extend(f"{name}: not found" for name in missing)
    return "\n".join(lines).rstrip() + "\n"


def all_finished(jobs: list[Obj]) -> bool:
    return bool(jobs) and all(j.get("state") in FINISHED for j in jobs)


def reference(job: Obj) -> str:
    """``kind.group/name``, as ``kubectl get -o name`` prints it (so kubectl takes it back:
    ``kubectl describe $(... -o name)``)."""
    kind = str(job.get("kind"))
    group = kinds.of({"kind": kind}).api_version.rpartition("/")[0]
    resource = f"{kind.lower()}.{group}" if group else kind.lower()
    return f"{resource}/{job.get('name')}"


def document(data: Obj, fmt: str) -> str:
    """``data`` as ``json`` (indented) or ``yaml``, in the API's field order."""
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip("\n")
    return json.dumps(data, indent=2)


def problem_line(problem: Obj, status: int | None = None) -> str:
    """A problem document as one line: its detail, the status, then each field's error that
    the detail does not already say."""
    status = status or problem.get("status")
    detail = str(problem.get("detail") or problem.get("title") or "failed")
    extra = [f"{e.get('field')}: {e.get('message')}" for e in problem.get("errors") or []]
    extra = [text for text in extra if text not in detail]
    line = f"{detail} ({status})" if status else detail
    return line + (": " + "; ".join(extra) if extra else "")
