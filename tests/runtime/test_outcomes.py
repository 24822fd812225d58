"""One verdict for several handler runs."""

from __future__ import annotations

import pytest

from functions.runtime.outcomes import Outcome, combine


@pytest.mark.parametrize(("outcomes", "expected"), [
    pytest.param([], Outcome("ignored", "no controller handles this object"), id="nothing"),
    pytest.param([Outcome("ok", runs=1), Outcome("ignored")], Outcome("ok", runs=1),
                 id="ok"),
    pytest.param([Outcome("ok", runs=1), Outcome("invalid", "bad spec", runs=1)],
                 Outcome("invalid", "bad spec", runs=2), id="invalid"),
    pytest.param([Outcome("invalid", "bad", runs=1),
                  Outcome("retry", "api down", 2.0, 1, "temporary"),
                  Outcome("retry", "boom", 30.0, 1, "bug")],
                 Outcome("retry", "api down; boom", 30.0, 3, "bug,temporary"),
                 id="retry-wins-with-the-longest-wait"),
    pytest.param([Outcome("busy", "a is busy", 5.0), Outcome("ok", runs=1)],
                 Outcome("busy", "a is busy", 5.0, 1), id="busy"),
])
def test_combine(outcomes: list[Outcome], expected: Outcome) -> None:
    assert combine(outcomes) == expected
