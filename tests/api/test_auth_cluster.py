"""TokenReview and SubjectAccessReview on a real API server: 401, 403, and no leaks."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from functions.api.app import create_api_app
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.api.conftest import (
    JOB_RULES,
    ROLES,
    grant,
    job_request,
    mint_token,
    wait_allowed,
)
from tests.support import wait_for


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_users_see_only_namespaces_they_may_use(
        client: FlaskClient, kube: KubeClient, namespace: str, other_namespace: str) -> None:
    alice = mint_token(kube, namespace, "alice")
    grant(kube, namespace, namespace, "alice")
    bob = mint_token(kube, other_namespace, "bob")
    grant(kube, other_namespace, other_namespace, "bob")
    wait_allowed(client, namespace, alice)
    wait_allowed(client, other_namespace, bob)
    bobs = f"/v1/namespaces/{other_namespace}/jobs"
    assert client.post(bobs, json=job_request("secret"), headers=bearer(bob)).status_code == 201

    for method, path in (("get", f"{bobs}/secret"), ("delete", f"{bobs}/secret"),
                         ("get", bobs), ("get", f"{bobs}/secret/events"),
                         ("get", f"{bobs}/secret/logs"), ("get", f"{bobs}/nothing-here")):
        answer = client.open(path, method=method.upper(), headers=bearer(alice))
        assert answer.status_code == 403, (method, path, answer.get_json())
        assert answer.mimetype == "application/problem+json"
        assert "secret" not in answer.get_data(as_text=True)
    created = client.post(bobs, json=job_request("intruder"), headers=bearer(alice))
    assert created.status_code == 403
    assert kube.get(resources.PYTORCHJOBS, "intruder", other_namespace) is None
    assert kube.get(resources.PYTORCHJOBS, "secret", other_namespace) is not None

    # Bob's job does not show up in Alice's namespace either, and Bob still sees it.
    assert client.get(f"/v1/namespaces/{namespace}/jobs",
                      headers=bearer(alice)).get_json()["items"] == []
    assert client.get(f"{bobs}/secret", headers=bearer(bob)).status_code == 200


def test_a_kind_you_may_not_read_looks_absent(
        client: FlaskClient, kube: KubeClient, namespace: str) -> None:
    carol = mint_token(kube, namespace, "carol")
    grant(kube, namespace, namespace, "carol", rules=[
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"],
         "verbs": ["get", "list", "create", "delete"]}])
    wait_allowed(client, namespace, carol)
    base = f"/v1/namespaces/{namespace}/jobs"
    tf = client.post(base, json=job_request("tf-only", framework="tensorflow"),
                     headers=bearer(carol))
    assert tf.status_code == 403
    kube.create({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                 "metadata": {"name": "hidden", "namespace": namespace},
                 "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {
                     "containers": [{"name": "tensorflow", "image": "x"}]}}}}}},
                res=resources.TFJOBS)
    hidden = client.get(f"{base}/hidden", headers=bearer(carol))
    absent = client.get(f"{base}/never-was", headers=bearer(carol))
    assert (hidden.status_code, absent.status_code) == (404, 404)
    assert client.get(base, headers=bearer(carol)).get_json()["items"] == []


@pytest.mark.parametrize("header", [
    pytest.param(None, id="no-header"),
    pytest.param("Bearer not-a-token", id="garbage-token"),
    pytest.param("Basic YWxpY2U6cGFzcw==", id="basic-auth"),
    pytest.param("Bearer ", id="empty-token"),
])
def test_bad_tokens_get_401(client: FlaskClient, namespace: str, kube: KubeClient,
                            header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    for method, path in (("POST", f"/v1/namespaces/{namespace}/jobs"),
                         ("GET", f"/v1/namespaces/{namespace}/jobs"),
                         ("GET", f"/v1/namespaces/{namespace}/jobs/x"),
                         ("DELETE", f"/v1/namespaces/{namespace}/jobs/x")):
        answer = client.open(path, method=method, headers=headers,
                             json=job_request("x") if method == "POST" else None)
        assert answer.status_code == 401, (method, answer.get_json())
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert answer.get_json()["status"] == 401
    assert kube.list(resources.PYTORCHJOBS, namespace) == []


def test_a_token_of_a_deleted_account_stops_working(
        client: FlaskClient, kube: KubeClient, namespace: str) -> None:
    dave = mint_token(kube, namespace, "dave")
    grant(kube, namespace, namespace, "dave")
    wait_allowed(client, namespace, dave)
    kube.delete(resources.SERVICEACCOUNTS, "dave", namespace)
    # Reviews are cached per app for a few seconds; a new app asks the API server afresh.
    fresh = create_api_app(kube_factory=lambda: kube).test_client()
    wait_for(lambda: fresh.get(f"/v1/namespaces/{namespace}/jobs",
                               headers=bearer(dave)).status_code == 401,
             timeout=15, message="the bound token to be rejected")


def test_trainjobs_need_their_own_permission(
        client: FlaskClient, kube: KubeClient, namespace: str, trainer_crds: None) -> None:
    """May use the kubeflow.org kinds but not TrainJobs: submitting one is a 403 and one that
    exists looks absent; with the TrainJob rule added, both work."""
    erin = mint_token(kube, namespace, "erin")
    grant(kube, namespace, namespace, "erin", rules=[JOB_RULES[0]])
    wait_allowed(client, namespace, erin)
    base = f"/v1/namespaces/{namespace}/jobs"
    body = {"name": "llm", "runtime": "torch-distributed", "image": "img:1"}
    refused = client.post(base, json=body, headers=bearer(erin))
    assert refused.status_code == 403 and refused.mimetype == "application/problem+json"
    assert kube.list(resources.TRAINJOBS, namespace) == []
    kube.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "metadata": {"name": "hidden", "namespace": namespace},
                 "spec": {"runtimeRef": {"name": "torch-distributed"}}},
                res=resources.TRAINJOBS)
    assert client.get(f"{base}/hidden", headers=bearer(erin)).status_code == 404
    assert client.delete(f"{base}/hidden", headers=bearer(erin)).status_code == 404
    assert client.get(base, headers=bearer(erin)).get_json()["items"] == []

    kube.patch(ROLES, "training-erin", {"rules": JOB_RULES[:2]}, namespace)
    wait_for(lambda: client.post(base, json=body, headers=bearer(erin)).status_code == 201,
             timeout=15, message="the TrainJob rule to take effect")
    # Reviews are cached per app for a few seconds: the denials are remembered a moment.
    wait_for(lambda: sorted(j["name"] for j in client.get(base, headers=bearer(erin))
                            .get_json()["items"]) == ["hidden", "llm"],
             timeout=15, message="the TrainJobs to be listed")
    wait_for(lambda: client.delete(f"{base}/hidden", headers=bearer(erin)).status_code == 204,
             timeout=15, message="the TrainJob to be deleted")
    assert kube.get(resources.TRAINJOBS, "hidden", namespace) is None
