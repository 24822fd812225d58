"""The Knative delivery contract (``spec.delivery``) as pure rules: when to retry and how long
to wait.

A Broker retries a failed delivery ``retry`` times, waiting ``backoffDelay * n`` (linear) or
``backoffDelay * 2^n`` (exponential) before retry ``n``, on transport errors, any 5xx and 404,
408, 409, 429 (knative/eventing ``pkg/kncloudevents/retries.go``); other statuses are final.
The local router and replay use these rules so a function sees locally what it sees in a
cluster. Unlike a default Knative install the router also honours ``Retry-After`` (capped by
``retryAfterMax``, default 60 s), which is what a function's 429/503 answers ask for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

BackoffPolicy = Literal["linear", "exponential"]

RETRIABLE_STATUSES = frozenset({404, 408, 409, 429})
DEFAULT_RETRY_AFTER_MAX = 60.0

_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$")


class DeliverySpecError(ValueError):
    """A ``spec.delivery`` that cannot be honoured."""


def parse_duration(text: str) -> float:
    """Seconds of an ISO-8601 duration such as ``PT0.2S``, ``PT1M30S`` or ``P1D``."""
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if match is None or text.strip() in ("P", "PT") or text.strip().endswith("T"):
        raise DeliverySpecError(f"not an ISO-8601 duration: {text!r}")
    parts = {name: float(value) for name, value in match.groupdict().items() if value}
    return (parts.get("days", 0.0) * 86400 + parts.get("hours", 0.0) * 3600
            + parts.get("minutes", 0.0) * 60 + parts.get("seconds", 0.0))


@dataclass(frozen=True, slots=True)
class DeliverySpec:
    """``retry`` retries after the first attempt; durations in seconds."""

    retry: int = 0
    backoff_policy: BackoffPolicy = "exponential"
    backoff_delay: float = 0.2
    timeout: float | None = None
    retry_after_max: float = DEFAULT_RETRY_AFTER_MAX
    dead_letter_sink: Mapping[str, Any] | None = None

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None,
                  base: DeliverySpec | None = None) -> DeliverySpec:
        """A ``spec.delivery`` mapping, with fields it leaves out taken from ``base``."""
        base = base or cls()
        if not spec:
            return base
        policy = spec.get("backoffPolicy", base.backoff_policy)
        if policy not in ("linear", "exponential"):
            raise DeliverySpecError(f"backoffPolicy must be linear or exponential: {policy!r}")
        retry = spec.get("retry", base.retry)
        if not isinstance(retry, int) or retry < 0:
            raise DeliverySpecError(f"retry must be a non-negative integer: {retry!r}")
        return cls(
            retry=retry,
            backoff_policy=policy,
            backoff_delay=_duration_or(spec.get("backoffDelay"), base.backoff_delay),
            timeout=_duration_or(spec.get("timeout"), base.timeout),
            retry_after_max=_duration_or(spec.get("retryAfterMax"), base.retry_after_max),
            dead_letter_sink=spec.get("deadLetterSink", base.dead_letter_sink),
        )

    def backoff(self, retry_number: int) -> float:
        """Seconds to wait before retry ``retry_number`` (1 for the first retry)."""
        if self.backoff_policy == "linear":
            return self.backoff_delay * retry_number
        return float(self.backoff_delay * (2 ** retry_number))

    def delay_before(self, retry_number: int, retry_after: float | None) -> float:
        """The backoff, stretched to a ``Retry-After`` the subscriber asked for (capped)."""
        delay = self.backoff(retry_number)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.retry_after_max))
        return delay


def _duration_or(value: Any, default: float | None) -> Any:
    return default if value in (None, "") else parse_duration(str(value))


def should_retry(status: int | None) -> bool:
    """``None`` means no HTTP answer at all (connection refused, reset, timeout)."""
    return status is None or status >= 500 or status in RETRIABLE_STATUSES


def is_success(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())
