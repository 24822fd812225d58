"""How high a queue priority each namespace may ask for: a policy the platform admin sets.

Without one, a submitter could give every job the top priority and jump the queue. The policy
is the ``data`` of a ConfigMap in the platform's namespace (:data:`CONFIGMAP`):

* ``maxPriority``: the highest priority any namespace may use (default ``0``: nobody jumps the
  queue unless the admin says so);
* ``maxPriority.<namespace>``: that namespace's own maximum, above or below the default.

Maxima are integers from 0 to 1000; lowering a job's priority (to as far as -1000) is always
allowed. An entry that is not such an integer is ignored (and reported), so a typing mistake
never grants more than the admin meant. The API refuses a request above its namespace's
maximum; the queue orders a job by its priority capped at that maximum, so a priority written
on a CR directly, past the API, gains nothing either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

CONFIGMAP = "odh-training-queue-policy"
DEFAULT_KEY = "maxPriority"
NAMESPACE_KEY_PREFIX = "maxPriority."
HIGHEST = 1000


@dataclass(frozen=True, slots=True)
class PriorityPolicy:
    default_max: int = 0
    per_namespace: Mapping[str, int] = field(default_factory=dict)

    def max_for(self, namespace: str) -> int:
        return self.per_namespace.get(namespace, self.default_max)

    def refusal(self, namespace: str, priority: int) -> str | None:
        """Why ``priority`` is not allowed in ``namespace`` (``None`` when it is)."""
        most = self.max_for(namespace)
        if priority <= most:
            return None
        return (f"priority {priority} is above {most}, the highest the platform allows in "
                f"namespace {namespace} (ConfigMap {CONFIGMAP})")

    def effective(self, namespace: str, priority: int) -> int:
        """The priority the queue orders by: the asked one, capped at the namespace's max."""
        return min(priority, self.max_for(namespace))


def _maximum(raw: str) -> int | None:
    try:
        value = int(raw.strip())
    except ValueError:
        return None
    return value if 0 <= value <= HIGHEST else None


def policy_from_data(data: Mapping[str, str] | None) -> tuple[PriorityPolicy, list[str]]:
    """The policy of a ConfigMap's ``data`` (``None``: no ConfigMap), and what was ignored."""
    ignored: list[str] = []
    default = 0
    per_namespace: dict[str, int] = {}
    for key, raw in (data or {}).items():
        if key != DEFAULT_KEY and not key.startswith(NAMESPACE_KEY_PREFIX):
            ignored.append(f"{key}: not a policy key")
            continue
        value = _maximum(str(raw))
        if value is None:
            ignored.append(f"{key}: {str(raw)[:40]!r} is not an integer from 0 to {HIGHEST}")
        elif key == DEFAULT_KEY:
            default = value
        else:
            per_namespace[key.removeprefix(NAMESPACE_KEY_PREFIX)] = value
    return PriorityPolicy(default, per_namespace), ignored
