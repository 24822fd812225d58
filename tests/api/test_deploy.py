"""The API's Knative Service and RBAC hang together and cover what the service calls."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support import REPO

Obj = dict[str, Any]


def documents(path: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]


def allowed(rules: list[Obj], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               for r in rules)


def test_service_runs_serve_api_as_its_own_account() -> None:
    [ksvc] = documents("config/api/service.yaml")
    spec = ksvc["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert container["args"] == ["serve", "api"]
    accounts = {d["metadata"]["name"] for d in documents("config/api/rbac.yaml")
                if d["kind"] == "ServiceAccount"}
    assert spec["serviceAccountName"] in accounts
    env = {e["name"]: e["value"] for e in container["env"]}
    assert spec["containerConcurrency"] == int(env["THREADS"])


def test_role_covers_reviews_and_job_verbs_and_nothing_more() -> None:
    [role] = [d for d in documents("config/api/rbac.yaml") if d["kind"] == "ClusterRole"]
    rules = role["rules"]
    assert allowed(rules, "authentication.k8s.io", "tokenreviews", "create")
    assert allowed(rules, "authorization.k8s.io", "subjectaccessreviews", "create")
    for verb in ("get", "list", "create", "delete"):
        assert allowed(rules, "kubeflow.org", "pytorchjobs", verb)
        assert allowed(rules, "trainer.kubeflow.org", "trainjobs", verb)
    assert not allowed(rules, "kubeflow.org", "pytorchjobs", "patch")
    assert not allowed(rules, "trainer.kubeflow.org", "trainjobs", "patch")
    assert allowed(rules, "trainer.kubeflow.org", "clustertrainingruntimes", "get")
    for verb in ("list", "create", "patch", "delete"):
        assert not allowed(rules, "trainer.kubeflow.org", "clustertrainingruntimes", verb)
    assert allowed(rules, "", "pods/log", "get")
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in rules)
