"""Knative delivery rules: durations, backoff schedules, what is retried, Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from functions.core.delivery import (
    DeliverySpec,
    DeliverySpecError,
    parse_duration,
    parse_retry_after,
    should_retry,
)


@pytest.mark.parametrize(("text", "seconds"), [
    pytest.param("PT0.2S", 0.2, id="fraction"),
    pytest.param("PT1M30S", 90.0, id="minutes-seconds"),
    pytest.param("PT2H", 7200.0, id="hours"),
    pytest.param("P1DT1S", 86401.0, id="days"),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["P", "PT", "0.2", "PT1", "1S", "PTS"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(DeliverySpecError):
        parse_duration(text)


@pytest.mark.parametrize(("spec", "delays"), [
    pytest.param({"retry": 3, "backoffPolicy": "exponential", "backoffDelay": "PT0.2S"},
                 [0.4, 0.8, 1.6], id="exponential"),
    pytest.param({"retry": 3, "backoffPolicy": "linear", "backoffDelay": "PT0.5S"},
                 [0.5, 1.0, 1.5], id="linear"),
])
def test_backoff_schedule(spec: dict[str, Any], delays: list[float]) -> None:
    delivery = DeliverySpec.from_spec(spec)
    assert [delivery.backoff(n) for n in range(1, delivery.retry + 1)] == pytest.approx(delays)


def test_retry_after_stretches_the_backoff_up_to_its_cap() -> None:
    delivery = DeliverySpec.from_spec({"retry": 2, "backoffDelay": "PT0.1S",
                                       "retryAfterMax": "PT5S"})
    assert delivery.delay_before(1, None) == pytest.approx(0.2)
    assert delivery.delay_before(1, 3.0) == pytest.approx(3.0)
    assert delivery.delay_before(1, 600.0) == pytest.approx(5.0)
    assert delivery.delay_before(1, 0.0) == pytest.approx(0.2)


def test_fields_left_out_come_from_the_base() -> None:
    base = DeliverySpec(retry=10, backoff_delay=0.2)
    assert DeliverySpec.from_spec({"retry": 2}, base) == DeliverySpec(retry=2,
                                                                      backoff_delay=0.2)
    assert DeliverySpec.from_spec(None, base) is base
    with pytest.raises(DeliverySpecError):
        DeliverySpec.from_spec({"backoffPolicy": "fibonacci"})


@pytest.mark.parametrize(("status", "retried"), [
    pytest.param(None, True, id="no-answer"),
    pytest.param(500, True, id="500"),
    pytest.param(503, True, id="503"),
    pytest.param(404, True, id="404"),
    pytest.param(408, True, id="408"),
    pytest.param(409, True, id="409"),
    pytest.param(429, True, id="429"),
    pytest.param(400, False, id="400"),
    pytest.param(413, False, id="413"),
    pytest.param(422, False, id="422"),
    pytest.param(302, False, id="302"),
])
def test_what_is_retried(status: int | None, retried: bool) -> None:
    assert should_retry(status) is retried


@pytest.mark.parametrize(("value", "seconds"), [
    pytest.param("7", 7.0, id="delta-seconds"),
    pytest.param("Mon, 30 Nov 2026 00:00:10 GMT", 10.0, id="http-date"),
    pytest.param("Mon, 29 Nov 2026 00:00:10 GMT", 0.0, id="http-date-in-the-past"),
    pytest.param("soon", None, id="garbage"),
    pytest.param(None, None, id="absent"),
])
def test_retry_after(value: str | None, seconds: float | None) -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_retry_after(value, now) == seconds
