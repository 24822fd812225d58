"""The guards a job opts into by annotation, beside the upstream API (which stays as it is):

* a **pending timeout** (:data:`PENDING_TIMEOUT`): a job whose pods stay Pending past it (or,
  with Volcano, whose PodGroup stays unadmitted) fails, or is handed back to its queue
  (``spec.runPolicy.suspend``) when :data:`PENDING_TIMEOUT_ACTION` says ``Suspend``;
* **whole-job restart** (:data:`RESTART_SCOPE` ``Job``): a failure that restarts a pod
  restarts every pod of the job instead, counted once (:mod:`.restarts`);
* a **restart limit per replica type** (:data:`RESTART_LIMITS`), beside ``backoffLimit``.

Admission refuses malformed values (the ValidatingAdmissionPolicy that ``hack/gen_job_crds.py``
writes from :data:`DURATION_PATTERN` and :data:`LIMITS_PATTERN`); a value that slipped past it
(a job stored before the policy was installed) reads as if absent, so a bad annotation never
stops a job that would run without it.

The clock of a pending timeout is on the objects: each Pending pod's ``creationTimestamp`` (a
PodGroup's while Volcano holds the pods back). Any pass can tell how long they have waited, so
a lost timer costs at most one resync; the reconcile function also writes the moment the
timeout falls due on the job (:data:`PENDING_DEADLINE`) for whatever schedules passes from the
objects themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from functions.jobs.core import conditions as c
from functions.jobs.core.model import Job, JobStatus, Obj

PREFIX = "training.opendatahub.io/"
PENDING_TIMEOUT = f"{PREFIX}pending-timeout"
PENDING_TIMEOUT_ACTION = f"{PREFIX}pending-timeout-action"
RESTART_SCOPE = f"{PREFIX}restart-scope"
RESTART_LIMITS = f"{PREFIX}restart-limits"
# Written by the reconcile function: when the pending timeout of the pods Pending now falls
# due (RFC 3339); absent while nothing is Pending.
PENDING_DEADLINE = f"{PREFIX}pending-deadline"

FAIL = "Fail"
SUSPEND = "Suspend"
ACTIONS = (FAIL, SUSPEND)
POD_SCOPE = "Pod"
JOB_SCOPE = "Job"
SCOPES = (POD_SCOPE, JOB_SCOPE)

# A Go-style duration of hours, minutes and seconds ("10m", "1h30m", "90s"); zero is refused.
DURATION_PATTERN = r"^([0-9]{1,6}[hms]){1,3}$"
ZERO_DURATION_PATTERN = r"^(0+[hms]){1,3}$"
# "<replica type>=<restarts>" pairs, comma-separated ("Worker=3,Master=0").
LIMITS_PATTERN = r"^[A-Za-z][A-Za-z0-9]*=[0-9]{1,4}(,[A-Za-z][A-Za-z0-9]*=[0-9]{1,4})*$"
_UNITS = {"h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(DURATION_PATTERN)
_LIMITS = re.compile(LIMITS_PATTERN)

PENDING_TIMEOUT_SUFFIX = "PendingTimeout"
RESTART_LIMIT_SUFFIX = "RestartLimitExceeded"


def parse_duration(text: object, *, allow_zero: bool = False) -> float | None:
    """Seconds of a duration as :data:`DURATION_PATTERN` has it (``None`` when malformed)."""
    value = str(text or "").strip()
    if not _DURATION.match(value):
        return None
    seconds = float(sum(int(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+)([hms])", value)))
    return seconds if seconds > 0 or allow_zero else None


def format_duration(seconds: float) -> str:
    """``4500`` -> ``1h15m``: how messages name a duration."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return text or "0s"


def parse_limits(text: object) -> dict[str, int] | None:
    """``"Worker=3,Master=0"`` -> ``{"worker": 3, "master": 0}`` (keys lower-cased)."""
    value = str(text or "").strip()
    if not _LIMITS.match(value):
        return None
    out: dict[str, int] = {}
    for pair in value.split(","):
        name, _, limit = pair.partition("=")
        out[name.lower()] = int(limit)
    return out


@dataclass(frozen=True, slots=True)
class Guards:
    """What a job opted into (the defaults: nothing)."""

    pending_timeout: float | None = None         # seconds
    pending_action: str = FAIL
    whole_job: bool = False
    restart_limits: Mapping[str, int] = field(default_factory=dict)  # canonical type -> limit

    @property
    def any(self) -> bool:
        return bool(self.pending_timeout or self.whole_job or self.restart_limits)


NONE = Guards()


def guards_of(job: Job) -> Guards:
    """The guards ``job``'s annotations ask for; malformed values read as absent."""
    annotations = job.annotations
    if not annotations:
        return NONE
    timeout = parse_duration(annotations.get(PENDING_TIMEOUT))
    action = annotations.get(PENDING_TIMEOUT_ACTION, FAIL)
    whole = annotations.get(RESTART_SCOPE) == JOB_SCOPE
    limits: dict[str, int] = {}
    for name, limit in (parse_limits(annotations.get(RESTART_LIMITS)) or {}).items():
        for rtype in job.replica_specs:
            if rtype.lower() == name:
                limits[rtype] = limit
    if timeout is None and not whole and not limits:
        return NONE
    return Guards(timeout, action if action in ACTIONS else FAIL, whole, limits)


# -- the pending timeout ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Waiting:
    """One thing the job waits for: a Pending pod, or a PodGroup Volcano has not admitted."""

    what: str             # "pod mnist-worker-0", "PodGroup mnist"
    since: datetime
    why: str = ""         # the scheduler's word, when it gave one


def _created(obj: Obj) -> datetime | None:
    return c.parse_time((obj.get("metadata") or {}).get("creationTimestamp"))


def _unschedulable(pod: Obj) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return " ".join(str(cond.get(k) or "") for k in ("reason", "message")).strip()
    return ""


def waiting(pods: Iterable[Obj], podgroup_waiting_since: datetime | None = None) -> list[Waiting]:
    """What the job is waiting for now: its Pending pods that are not going away (a pod just
    created, whose phase is not set yet, is Pending), oldest first."""
    found: list[Waiting] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
            continue
        created = _created(pod)
        if created is not None:
            found.append(Waiting(f"pod {meta.get('name', '')}", created, _unschedulable(pod)))
    if podgroup_waiting_since is not None:
        found.append(Waiting("the PodGroup (not admitted by the gang scheduler)",
                             podgroup_waiting_since))
    return sorted(found, key=lambda w: w.since)


@dataclass(frozen=True, slots=True)
class PendingCheck:
    """The pending timeout of a job now: the oldest thing waiting and when it falls due."""

    oldest: Waiting
    due: datetime
    expired: bool


def pending_check(job: Job, guards: Guards, pods: Sequence[Obj], now: datetime,
                  podgroup_since: datetime | None = None) -> PendingCheck | None:
    """``None`` when the job has no pending timeout, is not running (suspended, finished) or
    waits for nothing."""
    if guards.pending_timeout is None or job.suspended or job.status.finished:
        return None
    found = waiting(pods, podgroup_since)
    if not found:
        return None
    due = found[0].since + timedelta(seconds=guards.pending_timeout)
    return PendingCheck(found[0], due, now >= due)


def timeout_message(job: Job, guards: Guards, check: PendingCheck, action: str) -> str:
    assert guards.pending_timeout is not None
    outcome = ("has failed" if action == FAIL
               else "is suspended and handed back to its queue")
    why = f" ({check.oldest.why})" if check.oldest.why else ""
    return (f"{job.kind} {job.name} {outcome}: {check.oldest.what} waited longer than its "
            f"pending timeout of {format_duration(guards.pending_timeout)} "
            f"({PENDING_TIMEOUT}){why}")[:1024]


def newly_timed_out(persisted: Obj, derived: Obj) -> bool:
    """Whether ``derived`` (wire form) fails the job by its pending timeout where
    ``persisted`` had not: destroying nothing, but absorbing, so confirmed on fresh state."""
    def reason(status: Obj) -> str:
        for cond in status.get("conditions") or []:
            if cond.get("type") == c.FAILED and cond.get("status") == "True":
                return str(cond.get("reason") or "")
        return ""
    return (reason(derived).endswith(PENDING_TIMEOUT_SUFFIX)
            and not reason(persisted).endswith(PENDING_TIMEOUT_SUFFIX))


def timed_out(status: JobStatus | None) -> bool:
    """Whether ``status`` says the job failed by its pending timeout."""
    failed = status.condition(c.FAILED) if status is not None else None
    return (failed is not None and failed.status == "True"
            and failed.reason.endswith(PENDING_TIMEOUT_SUFFIX))
