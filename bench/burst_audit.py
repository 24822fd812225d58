"""API requests per client identity, counted from the kube-apiserver's audit log.

Counting on the server side is the one way that treats every system alike: the Go operator,
our functions and a plain create loop each run under their own identity (a client
certificate or a ServiceAccount token), and the API server logs every request it serves
under that identity, whatever client library sent it. The log is JSON lines at Metadata
level without the RequestReceived stage (``LocalCluster(audit=True)``); a watch still logs two
stages (ResponseStarted, ResponseComplete), so each request is counted once by its
``auditID``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# user -> {"total": n, "by_verb": {verb: n}, "by_verb_resource": {"verb resource": n}}
Counts = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class AuditedRequest:
    user: str
    verb: str
    resource: str  # plural[/subresource], or the path of a non-resource request
    received: float  # epoch seconds


def timestamp(text: str) -> float:
    """Epoch seconds of an RFC 3339 stamp as the API server writes it."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def resource_of(event: Mapping[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    if ref.get("resource"):
        sub = ref.get("subresource")
        return f"{ref['resource']}/{sub}" if sub else str(ref["resource"])
    return urlsplit(str(event.get("requestURI") or "")).path or "?"


def parse(lines: Iterable[str]) -> Iterator[AuditedRequest]:
    """One :class:`AuditedRequest` per audit ID; lines that are not audit events (a line cut
    short while the log is written) are skipped."""
    seen: set[str] = set()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("kind") != "Event":
            continue
        audit_id = str(event.get("auditID") or "")
        if audit_id in seen:
            continue
        seen.add(audit_id)
        stamp = event.get("requestReceivedTimestamp") or event.get("stageTimestamp") or ""
        yield AuditedRequest(str((event.get("user") or {}).get("username") or "?"),
                             str(event.get("verb") or "?"), resource_of(event),
                             timestamp(stamp) if stamp else 0.0)


def count(requests: Iterable[AuditedRequest], since: float | None = None,
          until: float | None = None) -> Counts:
    """Requests received in ``[since, until]`` per user, by verb and by verb and resource."""
    verbs: dict[str, Counter[str]] = {}
    pairs: dict[str, Counter[str]] = {}
    for request in requests:
        if since is not None and request.received < since:
            continue
        if until is not None and request.received > until:
            continue
        verbs.setdefault(request.user, Counter())[request.verb] += 1
        pairs.setdefault(request.user, Counter())[f"{request.verb} {request.resource}"] += 1
    return {user: {"total": sum(verbs[user].values()),
                   "by_verb": dict(sorted(verbs[user].items())),
                   "by_verb_resource": dict(sorted(pairs[user].items()))}
            for user in sorted(verbs)}


def combined(counts: Counts, users: Iterable[str]) -> dict[str, Any]:
    """The counts of several identities (one system's processes) added together."""
    verbs: Counter[str] = Counter()
    pairs: Counter[str] = Counter()
    for user in users:
        verbs.update((counts.get(user) or {}).get("by_verb") or {})
        pairs.update((counts.get(user) or {}).get("by_verb_resource") or {})
    return {"total": sum(verbs.values()), "by_verb": dict(sorted(verbs.items())),
            "by_verb_resource": dict(sorted(pairs.items()))}


def count_file(path: Path, since: float | None = None, until: float | None = None) -> Counts:
    with path.open(encoding="utf-8", errors="replace") as lines:
        return count(parse(lines), since, until)
