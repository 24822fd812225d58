"""Kubernetes timestamps (RFC 3339, ``Z``) read leniently and written as the API writes them."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> datetime | None:
    """The moment ``value`` names; ``None`` for anything that is not a timestamp."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds_between(start: object, end: object) -> float | None:
    """Seconds from ``start`` to ``end`` (never negative), when both are timestamps."""
    begun, ended = parse_time(start), parse_time(end)
    if begun is None or ended is None:
        return None
    return max(0.0, (ended - begun).total_seconds())
