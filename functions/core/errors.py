"""The small error tree every layer speaks.

Handlers raise these; the HTTP adapter maps them to status codes so that a Knative Broker
retries exactly what can succeed later and never retries what cannot.
"""

from __future__ import annotations


class FunctionsError(Exception):
    """Base of every error this package raises on purpose."""


class PermanentError(FunctionsError):
    """Retrying the same input cannot help (bad event, invalid object). Answered 4xx."""


class TemporaryError(FunctionsError):
    """A later retry may succeed (API 5xx, 429, timeouts, conflicts). Answered 503/429."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidEventError(PermanentError):
    """A CloudEvent that cannot be parsed or is not one this package understands."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
