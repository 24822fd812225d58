"""CPU time and peak memory of process trees, read from ``/proc`` (Linux).

A system under test is a few processes (the Go operator; each function's gunicorn master and
its workers; the event adapters): its CPU time is utime + stime of every live process in the
trees under their pids, plus the CPU of children those processes already reaped (cutime,
cstime), so a worker that exited is still counted. Peak memory is each process's high-water
mark (VmHWM) summed: an upper bound of the tree's peak.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


def parse_stat(text: str) -> tuple[int, int, int]:
    """``(ppid, own ticks, reaped children's ticks)`` from a ``/proc/<pid>/stat`` line. The
    command name may hold spaces and parentheses, so fields are counted after the last ``)``."""
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # the process exited meanwhile
        return None


def _stats() -> dict[int, tuple[int, int, int]]:
    found: dict[int, tuple[int, int, int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            text = _read(entry / "stat")
            if text is not None:
                found[int(entry.name)] = parse_stat(text)
    return found


def descendants(roots: Iterable[int], parents: dict[int, int]) -> set[int]:
    """``roots`` and every process below them, given each process's parent."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [pid for pid in roots if pid in parents]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def cpu_seconds(roots: Iterable[int]) -> float:
    """CPU seconds used so far by the trees under ``roots`` (reaped children included)."""
    stats = _stats()
    tree = descendants(roots, {pid: stat[0] for pid, stat in stats.items()})
    return sum(stats[pid][1] + stats[pid][2] for pid in tree) / TICKS


def own_cpu_of(pids: Iterable[int]) -> float:
    """CPU seconds used so far by the processes ``pids`` themselves (no child counted)."""
    total = 0
    for pid in pids:
        text = _read(PROC / str(pid) / "stat")
        if text is not None:
            total += parse_stat(text)[1]
    return total / TICKS


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    return [p for p, stat in _stats().items() if stat[0] == pid]


def peak_rss_mib(roots: Iterable[int]) -> float:
    """Sum of VmHWM over the live processes of the trees under ``roots``."""
    stats = _stats()
    total_kib = 0
    for pid in descendants(roots, {pid: stat[0] for pid, stat in stats.items()}):
        for line in (_read(PROC / str(pid) / "status") or "").splitlines():
            if line.startswith("VmHWM:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024


def own_cpu_seconds() -> float:
    """CPU seconds of this process's own threads (not of its children)."""
    return parse_stat(_read(PROC / "self" / "stat") or "")[1] / TICKS


def threads_cpu_seconds(selected: Callable[[str], bool]) -> float:
    """CPU seconds of this process's live threads whose names are ``selected`` (threads that
    already ended are not counted)."""
    total = 0
    for thread in threading.enumerate():
        if thread.native_id is None or not selected(thread.name):
            continue
        text = _read(PROC / "self" / "task" / str(thread.native_id) / "stat")
        if text is not None:
            total += parse_stat(text)[1]
    return total / TICKS
