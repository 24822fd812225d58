"""What one status write records: the job transitions upstream's metrics count.

The status function writes a job's status with the ``resourceVersion`` it read as a
precondition, so of all the writers that saw the same persisted status (retried passes,
coalesced deliveries, other replicas) exactly one write succeeds. Comparing what that write
replaced with what it wrote therefore counts each transition once, wherever it was decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class StatusTransitions:
    """The transitions between two statuses (both in wire form)."""

    created: bool = False        # the Created condition appeared (the job's first status)
    succeeded: bool = False      # Succeeded became True
    failed: bool = False         # Failed became True
    restarted: bool = False      # Restarting became True (a restart began)
    failed_pods: int = 0         # pods newly counted as failed, over all replica types

    @property
    def any(self) -> bool:
        return (self.created or self.succeeded or self.failed or self.restarted
                or self.failed_pods > 0)


def _true(status: Obj, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in status.get("conditions") or [])


def _failed(status: Obj) -> dict[str, int]:
    return {str(rtype): int((counts or {}).get("failed") or 0)
            for rtype, counts in (status.get("replicaStatuses") or {}).items()}


def status_transitions(before: Obj, after: Obj) -> StatusTransitions:
    """Transitions from the persisted status ``before`` to the written status ``after``.

    A replica type's ``failed`` count that grows counts its growth as failed pods; one that
    shrinks (a failed pod deleted for its restart) counts nothing, so a pod that fails, is
    replaced and whose replacement fails again counts twice, as two pods failed.
    """
    was, now = _failed(before), _failed(after)
    return StatusTransitions(
        created=_true(after, "Created") and not _true(before, "Created"),
        succeeded=_true(after, "Succeeded") and not _true(before, "Succeeded"),
        failed=_true(after, "Failed") and not _true(before, "Failed"),
        restarted=_true(after, "Restarting") and not _true(before, "Restarting"),
        failed_pods=sum(max(0, count - was.get(rtype, 0)) for rtype, count in now.items()),
    )


def regresses(persisted: Obj, derived: Obj) -> bool:
    """Whether ``derived`` moves a status backwards from ``persisted`` (both in wire form): a
    replica counter that drops, or a condition that stops being True.

    Such moves are legitimate (a restart, Running turning False when the job finishes) but
    rare, and they are exactly what a stale read of the pods would produce, so the status
    function confirms them on fresh state before writing.
    """
    before = persisted.get("replicaStatuses") or {}
    after = derived.get("replicaStatuses") or {}
    for rtype, counts in before.items():
        now = after.get(rtype) or {}
        if any(int(now.get(k) or 0) < int(counts.get(k) or 0)
               for k in ("active", "succeeded", "failed")):
            return True
    return bool(_true_conditions(persisted) - _true_conditions(derived))


def _true_conditions(status: Obj) -> set[str]:
    return {str(c.get("type")) for c in status.get("conditions") or []
            if c.get("status") == "True"}
