"""The training API under a fuzzer without a cluster (:mod:`tests.api.fakes`): every operation
of its OpenAPI document (schemathesis), with the API server answering, out of reach, or with no
API client at all; and raw request bodies, pathological ones included. Never a 500: answers are
documented, 4xx for the request's own faults, and 503 with ``Retry-After`` only when the
cluster cannot be reached. (``test_fuzz_cluster.py`` does the same against a real cluster.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from functions.api.app import create_api_app
from functions.kube.client import KubeClient
from tests.api.conftest import job_request
from tests.api.fakes import USER, FakeApiServer

EXAMPLES = 20
TEXT = st.text(max_size=30)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(TEXT, inner, max_size=4), max_leaves=15)


def no_client() -> KubeClient:
    raise FileNotFoundError("no kubeconfig and not in a cluster")


def make_app(cluster: str) -> Flask:
    if cluster == "no-client":
        return create_api_app(kube_factory=no_client)
    server = FakeApiServer()
    server.mode = "unreachable" if cluster == "unreachable" else "healthy"
    return create_api_app(kube_factory=server.client)


def why_unacceptable(status: int, headers: Any, body: bytes, cluster: str) -> str | None:
    if status < 500:
        return None
    text = body.decode("utf-8", "replace")
    retry_after = {str(k).lower(): v for k, v in dict(headers).items()}.get("retry-after")
    if status == 503 and cluster != "healthy" and retry_after and (
            "internal error" not in text):
        return None
    return f"{status} with the cluster {cluster}: {text[:300]}"


@pytest.mark.parametrize("cluster", ["healthy", "unreachable", "no-client"])
def test_every_operation_answers_as_documented(cluster: str) -> None:
    app = make_app(cluster)
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    statuses: list[int] = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(), authenticated=st.booleans())
        def run(case: Any, authenticated: bool) -> None:
            response = case.call(headers=USER if authenticated else {})
            statuses.append(response.status_code)
            problem = why_unacceptable(response.status_code, response.headers,
                                       response.content, cluster)
            assert problem is None, problem
            checks = [status_code_conformance, response_schema_conformance]
            if cluster == "healthy":
                checks.append(not_a_server_error)
            case.validate_response(response, checks=checks)

        run()
        if operation.method == "post" and cluster == "healthy":
            # Random bodies rarely pass validation: one valid request checks the 201 answer.
            case = operation.Case(path_parameters={"namespace": "team"},
                                  body=job_request("fuzz"), media_type="application/json")
            response = case.call(headers=USER)
            statuses.append(response.status_code)
            case.validate_response(response, checks=[status_code_conformance,
                                                     response_schema_conformance])
    assert len(statuses) >= EXAMPLES * 3
    if cluster == "healthy":
        assert {200, 201} <= set(statuses)  # it got past validation and reviews
    else:
        assert 503 in statuses


def nested(depth: int, opening: bytes) -> bytes:
    return opening * depth


BODIES = (
    st.binary(max_size=2048)
    | JSON.map(lambda value: json.dumps(value).encode())
    | st.builds(nested, st.integers(1, 60_000), st.sampled_from((b"[", b'{"a":', b'{"name":[')))
    | st.builds(lambda name, extra: json.dumps({**job_request(name), **extra}).encode(),
                st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
                st.dictionaries(st.sampled_from(("workers", "priority", "resources", "env",
                                                 "labels", "queue", "framework", "bogus")),
                                JSON, max_size=3))
)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES, content_type=st.sampled_from(
    ("application/json", "application/merge-patch+json", "text/plain", "")))
@example(body=b"[" * 50_000, content_type="application/json")
@example(body=b'{"name":' * 10_000, content_type="application/json")
def test_raw_job_bodies_never_answer_5xx(body: bytes, content_type: str) -> None:
    server = FakeApiServer()
    client = create_api_app(kube_factory=server.client).test_client()
    answer = client.post("/v1/namespaces/team/jobs", data=body, headers=USER,
                         content_type=content_type or None)
    assert answer.status_code in (201, 400, 403, 409, 413, 415, 422), (
        answer.status_code, answer.get_data(as_text=True)[:300])
    if answer.status_code >= 400:
        assert answer.mimetype == "application/problem+json"
        assert not server.created
