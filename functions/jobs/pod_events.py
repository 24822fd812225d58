"""Warning Events on a job for its stuck pods, once per cause.

The status function looks at a job's pods on every pass, and a stuck pod keeps causing passes
(the kubelet rewrites its waiting state at each back-off, the resync comes round). So each
process remembers the causes it has reported (bounded, least recently seen forgotten first)
and records an Event only for a cause it has not reported yet: a pass over an unchanged stuck
pod makes no API request. Another replica, or this process after a restart, may report the
same cause again; the recorder names an Event after the job's uid, the reason and the
message, so that repeat bumps the count of the same Event rather than adding one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from functions.jobs.core.model import Obj
from functions.jobs.core.pod_problems import PodProblem, pod_problems
from functions.runtime.registry import Context


class ReportedCauses:
    """The causes this process has reported, oldest forgotten first past ``size``."""

    def __init__(self, size: int = 16_384) -> None:
        self.size = size
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def first_sightings(self, problems: Iterable[PodProblem]) -> list[PodProblem]:
        """The problems not reported before, now marked as reported."""
        new: list[PodProblem] = []
        with self._lock:
            for problem in problems:
                if problem.key in self._seen:
                    self._seen.move_to_end(problem.key)
                    continue
                self._seen[problem.key] = None
                new.append(problem)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return new


REPORTED = ReportedCauses()


def report_stuck_pods(ctx: Context, job_obj: Obj, pods: Iterable[Obj]) -> None:
    """Record a Warning Event on the job for each cause of a stuck pod not reported yet."""
    for problem in REPORTED.first_sightings(pod_problems(pods)):
        ctx.recorder.record(job_obj, "Warning", problem.reason, problem.message)
