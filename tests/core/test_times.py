"""Kubernetes timestamps read leniently, written as the API writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from functions.core.times import parse_time, rfc3339, seconds_between

MOMENT = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)


@pytest.mark.parametrize(("value", "parsed"), [
    pytest.param("2026-01-01T00:00:05Z", MOMENT, id="zulu"),
    pytest.param("2026-01-01T01:00:05+01:00", MOMENT, id="offset"),
    pytest.param("", None, id="empty"),
    pytest.param(None, None, id="absent"),
    pytest.param(5, None, id="not-a-string"),
    pytest.param("yesterday", None, id="not-a-time"),
])
def test_parse_time(value: object, parsed: datetime | None) -> None:
    assert parse_time(value) == parsed


def test_rfc3339_is_utc_to_the_second() -> None:
    assert rfc3339(MOMENT.astimezone(timezone(timedelta(hours=2)))) == "2026-01-01T00:00:05Z"


@pytest.mark.parametrize(("start", "end", "seconds"), [
    pytest.param("2026-01-01T00:00:05Z", "2026-01-01T00:01:05Z", 60.0, id="a-minute"),
    pytest.param("2026-01-01T00:01:05Z", "2026-01-01T00:00:05Z", 0.0, id="never-negative"),
    pytest.param(None, "2026-01-01T00:00:05Z", None, id="no-start"),
    pytest.param("2026-01-01T00:00:05Z", "x", None, id="unreadable-end"),
])
def test_seconds_between(start: object, end: object, seconds: float | None) -> None:
    assert seconds_between(start, end) == seconds
