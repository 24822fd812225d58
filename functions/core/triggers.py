"""Knative Trigger filters, evaluated the way a Broker evaluates them.

The same Trigger YAML drives a real Knative Broker and the local router, so the router must
agree with Knative on what matches: the legacy ``spec.filter.attributes`` (exact, ANDed, ``""``
matches anything) and the Subscriptions-API ``spec.filters`` dialects ``exact``, ``prefix``,
``suffix``, ``all``, ``any`` and ``not`` (``filters`` wins when both are set). ``cesql`` is not
implemented and is refused when a Trigger is loaded rather than silently matching nothing.

Attribute names are CloudEvents context attribute or extension names (``type``, ``source``,
``kind``, ...); values compare as strings, case-sensitively. Pure: plain data in and out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

Attributes = Mapping[str, str]
Matcher = Callable[[Attributes], bool]

_DIALECTS = ("exact", "prefix", "suffix", "all", "any", "not", "cesql")


class TriggerSpecError(ValueError):
    """A Trigger this package cannot evaluate faithfully."""


@dataclass(frozen=True)
class TriggerFilter:
    """A compiled filter: ``matches(attributes)``; ``description`` says what it was built from."""

    matches: Matcher
    description: str


def compile_trigger_filter(spec: Mapping[str, Any]) -> TriggerFilter:
    """The filter of a Trigger ``spec`` (``filters`` if present, else ``filter.attributes``)."""
    filters = spec.get("filters")
    if filters:
        if not isinstance(filters, list):
            raise TriggerSpecError("spec.filters must be a list")
        matchers = [compile_filter(item) for item in filters]
        return TriggerFilter(_all_of(matchers), f"filters: {filters!r}")
    attributes = (spec.get("filter") or {}).get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise TriggerSpecError("spec.filter.attributes must be a mapping")
    return TriggerFilter(legacy_attributes_filter({str(k): str(v) for k, v in
                                                   attributes.items()}),
                         f"filter.attributes: {dict(attributes)!r}")


def legacy_attributes_filter(expected: Mapping[str, str]) -> Matcher:
    """All pairs must match exactly; an expected ``""`` accepts any value, even none."""
    required = {name: value for name, value in expected.items() if value != ""}

    def matches(attributes: Attributes) -> bool:
        return all(attributes.get(name) == value for name, value in required.items())

    return matches


def compile_filter(node: Any) -> Matcher:
    """One Subscriptions-API filter object (exactly one dialect key)."""
    if not isinstance(node, Mapping) or len(node) != 1:
        raise TriggerSpecError(f"a filter must be an object with exactly one of "
                               f"{', '.join(_DIALECTS)}: {node!r}")
    ((dialect, value),) = node.items()
    if dialect in ("exact", "prefix", "suffix"):
        return _compare(dialect, value)
    if dialect in ("all", "any"):
        if not isinstance(value, list) or not value:
            raise TriggerSpecError(f"{dialect!r} needs a non-empty list of filters")
        matchers = [compile_filter(item) for item in value]
        return _all_of(matchers) if dialect == "all" else _any_of(matchers)
    if dialect == "not":
        inner = compile_filter(value)
        return lambda attributes: not inner(attributes)
    if dialect == "cesql":
        raise TriggerSpecError("cesql filters are not supported by the local router")
    raise TriggerSpecError(f"unknown filter dialect {dialect!r}")


def _compare(dialect: str, value: Any) -> Matcher:
    if not isinstance(value, Mapping) or not value:
        raise TriggerSpecError(f"{dialect!r} needs a mapping of attribute to value")
    pairs = tuple((str(name), str(expected)) for name, expected in value.items())
    if any(expected == "" for _, expected in pairs):
        raise TriggerSpecError(f"{dialect!r} values must not be empty")
    test: Callable[[str, str], bool]
    if dialect == "exact":
        test = str.__eq__
    elif dialect == "prefix":
        test = str.startswith
    else:
        test = str.endswith

    def matches(attributes: Attributes) -> bool:
        for name, expected in pairs:
            actual = attributes.get(name)
            if actual is None or not test(actual, expected):
                return False
        return True

    return matches


def _all_of(matchers: list[Matcher]) -> Matcher:
    return lambda attributes: all(m(attributes) for m in matchers)


def _any_of(matchers: list[Matcher]) -> Matcher:
    return lambda attributes: any(m(attributes) for m in matchers)


def binary_attributes(headers: Mapping[str, str]) -> dict[str, str]:
    """Context attributes and extensions of a binary-mode request, for filtering."""
    attributes: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered.startswith("ce-"):
            attributes[lowered[3:]] = unquote(value)
        elif lowered == "content-type":
            attributes["datacontenttype"] = value
    return attributes


def structured_attributes(envelope: Mapping[str, Any]) -> dict[str, str]:
    """Context attributes and extensions of a structured-mode event (``data`` left out)."""
    return {name: _text(value) for name, value in envelope.items()
            if name not in ("data", "data_base64") and value is not None}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
