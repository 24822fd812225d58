"""Bad requests against the real app: 4xx problems naming the field, and nothing created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from functions.jobs.reads import RESOURCES
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.api.conftest import job_request

KINDS = tuple(RESOURCES.values())


def nothing_created(kube: KubeClient, namespace: str) -> bool:
    return all(kube.list(res, namespace) == [] for res in KINDS)


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


@pytest.mark.parametrize(("body", "status", "field"), [
    pytest.param(without(job_request("x"), "image"), 422, "image", id="missing-image"),
    pytest.param(job_request("x", workers=-1), 422, "workers", id="negative-workers"),
    pytest.param(job_request("x", framework="caffe"), 422, "framework", id="unknown-framework"),
    pytest.param(job_request("x", resources={"gpus": 1.5}), 422, "resources.gpus",
                 id="fractional-gpus"),
    pytest.param(job_request("UPPER"), 422, "name", id="bad-name"),
    pytest.param(job_request("x", labels={"kueue.x-k8s.io/queue-name": "q"}), 422, "labels",
                 id="reserved-label"),
    pytest.param(job_request("x", command=["a" * 5000]), 422, "command.0", id="huge-argument"),
    pytest.param(["not", "an", "object"], 422, "body", id="not-an-object"),
])
def test_invalid_requests(client: FlaskClient, user: dict[str, str], namespace: str,
                          kube: KubeClient, body: Any, status: int, field: str) -> None:
    answer = client.post(f"/v1/namespaces/{namespace}/jobs", json=body, headers=user)
    assert answer.status_code == status
    assert answer.mimetype == "application/problem+json"
    problem = answer.get_json()
    assert problem["status"] == status
    assert field in [e["field"] for e in problem["errors"]], problem
    assert nothing_created(kube, namespace)


def test_oversized_body(client: FlaskClient, user: dict[str, str], namespace: str,
                        kube: KubeClient) -> None:
    body = job_request("big", env={f"V{i}": "x" * 4000 for i in range(40)})
    answer = client.post(f"/v1/namespaces/{namespace}/jobs", data=json.dumps(body),
                         content_type="application/json", headers=user)
    assert answer.status_code == 413
    assert answer.get_json()["errors"][0]["field"] == "body"
    assert nothing_created(kube, namespace)


@pytest.mark.parametrize(("data", "content_type", "status"), [
    pytest.param("{not json", "application/json", 400, id="broken-json"),
    pytest.param("[" * 50_000, "application/json", 400, id="nested-50000-deep"),
    pytest.param("name=x", "application/x-www-form-urlencoded", 415, id="form"),
])
def test_unreadable_bodies(client: FlaskClient, user: dict[str, str], namespace: str,
                           kube: KubeClient, data: str, content_type: str, status: int) -> None:
    answer = client.post(f"/v1/namespaces/{namespace}/jobs", data=data,
                         content_type=content_type, headers=user)
    assert answer.status_code == status
    assert answer.get_json()["errors"][0]["field"] == "body"
    assert nothing_created(kube, namespace)


def test_duplicate_names_conflict_across_kinds(client: FlaskClient, user: dict[str, str],
                                               namespace: str, kube: KubeClient) -> None:
    base = f"/v1/namespaces/{namespace}/jobs"
    assert client.post(base, json=job_request("same"), headers=user).status_code == 201
    again = client.post(base, json=job_request("same", framework="mxnet"), headers=user)
    assert again.status_code == 409 and again.get_json()["errors"][0]["field"] == "name"
    assert kube.list(resources.MXJOBS, namespace) == []


@pytest.mark.parametrize(("path", "field"), [
    pytest.param("/v1/namespaces/Bad_NS/jobs", "namespace", id="namespace"),
    pytest.param("/v1/namespaces/ok/jobs/Bad_Name", "name", id="name"),
    pytest.param("/v1/namespaces/ok/jobs?limit=0", "limit", id="limit"),
    pytest.param("/v1/namespaces/ok/jobs?state=Dancing", "state", id="state"),
])
def test_bad_paths_and_queries(client: FlaskClient, user: dict[str, str], path: str,
                               field: str) -> None:
    answer = client.get(path, headers=user)
    assert answer.status_code == 400
    assert answer.get_json()["errors"][0]["field"] == field


def test_openapi_document_is_served_and_valid(client: FlaskClient) -> None:
    from openapi_spec_validator import validate

    answer = client.get("/openapi.json")
    assert answer.status_code == 200
    validate(answer.get_json())
