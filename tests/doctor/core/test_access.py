"""Permission expectations and their verdicts."""

from __future__ import annotations

import pytest

from functions.doctor.core import access
from functions.doctor.core.model import AccessReview, Status


def answer(expected: bool, allowed: bool, identity: str = "gc") -> AccessReview:
    return AccessReview(function=identity, verb="delete", group="", resource="pods",
                        namespace="team-a", expected=expected, allowed=allowed)


@pytest.mark.parametrize(("reviews", "status"), [
    pytest.param([answer(True, True), answer(False, False)], Status.PASS, id="as-expected"),
    pytest.param([answer(True, False)], Status.FAIL, id="needed-denied"),
    pytest.param([answer(False, True)], Status.WARN, id="excess-allowed"),
    pytest.param([answer(True, True, identity="status")], Status.SKIP, id="other-identity"),
    pytest.param([], Status.SKIP, id="not-installed"),
])
def test_permissions_verdict(reviews: list[AccessReview], status: Status) -> None:
    finding = access.permissions("gc", reviews)
    assert finding.status is status
    assert finding.status in (Status.PASS, Status.SKIP) or (finding.fix and finding.details)


def test_every_identity_has_needs_and_limits() -> None:
    for identity in ("reconcile", "gc", "status", "events", "dead-letters"):
        cases = access.expectations_for(identity)
        assert {c.allowed for c in cases} == {True, False}, identity


def test_the_func_identity_is_checked_for_the_union_of_the_functions_needs() -> None:
    cases = access.expectations_for(access.FUNC_IDENTITY)
    assert all(c.allowed for c in cases)
    assert {c.identity for c in cases} == set(access.FUNCTION_IDENTITIES)


@pytest.mark.parametrize(("scope", "namespace"), [
    pytest.param("cluster", "", id="cluster"),
    pytest.param("install", "opendatahub", id="install"),
    pytest.param("user", access.USER_NAMESPACE, id="user"),
])
def test_scopes_become_namespaces(scope: access.Scope, namespace: str) -> None:
    case = access.Expectation("gc", "list", "", "pods", scope)
    assert case.namespace("opendatahub") == namespace


def test_case_ids_are_unique() -> None:
    ids = [c.case_id() for c in access.EXPECTATIONS]
    assert len(ids) == len(set(ids))
