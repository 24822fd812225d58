"""Figures as the report shows them: the median of repeated runs with the min and max.

A figure is a dict ``{"median", "min", "max", "n"}`` (plus ``"unit"`` when the name does not
say it); :func:`figures` finds every figure in a suite's nested result so the report needs no
knowledge of the suites.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

Figure = dict[str, float]


def summary(values: Iterable[float], digits: int = 3) -> Figure:
    data = [float(v) for v in values]
    if not data:
        raise ValueError("a figure needs at least one value")
    return {"median": round(statistics.median(data), digits), "min": round(min(data), digits),
            "max": round(max(data), digits), "n": len(data)}


def is_figure(value: Any) -> bool:
    return isinstance(value, Mapping) and {"median", "min", "max"} <= set(value)


def figures(result: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Figure]]:
    """``("suite.path.name", figure)`` for every figure under ``result``, in order."""
    for key, value in result.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if is_figure(value):
            yield name, dict(value)
        elif isinstance(value, Mapping):
            yield from figures(value, name)
