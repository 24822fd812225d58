"""Every job kind of the framework table is wired everywhere a kind must be named: the event
source, each function's Trigger, the roles of the functions, the event source and the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.api.store import KINDS as API_KINDS
from functions.doctor.core.netpol import selector_matches
from functions.jobs.controller import CONTROLLERS, RESOURCES
from functions.jobs.core.frameworks import FRAMEWORKS, GROUP, Framework
from functions.jobs.core.plan import reconcile_plan
from functions.jobs.core.planning import Observed
from functions.jobs.core.settings import Settings
from functions.kube import resources
from functions.kube.gaps import reference
from functions.runtime.registry import FunctionName
from tests.jobs import fixtures

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]
KINDS = [pytest.param(fw, id=fw.kind) for fw in FRAMEWORKS]


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def job_rules(path: Path, role: str) -> list[Obj]:
    """The rules of ``role`` that name training-job kinds (top-level resources only)."""
    doc = next(d for d in documents(path)
               if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role)
    return [r for r in doc["rules"] if GROUP in r["apiGroups"]]


def trigger_kinds(trigger: Obj) -> set[str]:
    """Kinds named by ``exact: {kind: ...}`` anywhere in a Trigger's filters."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = (node.get("exact") or {}).get("kind")
            if kind:
                found.add(kind)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(trigger["spec"]["filters"])
    return found


@pytest.mark.parametrize("fw", KINDS)
def test_kind_has_a_controller_resource_and_api_kind(fw: Framework) -> None:
    res = RESOURCES[fw.kind]
    assert (res.api_version, res.plural) == (fw.api_version, fw.plural)
    assert resources.known(fw.api_version, fw.kind) == res
    assert any(c.parent == res for c in CONTROLLERS)
    assert res in API_KINDS


@pytest.mark.parametrize("fw", KINDS)
def test_event_source_and_every_trigger_carry_the_kind(fw: Framework) -> None:
    sources = documents(REPO / "eventing" / "apiserversource.yaml")
    carrying = [s["metadata"]["name"] for s in sources
                if {"apiVersion": fw.api_version, "kind": fw.kind} in s["spec"]["resources"]]
    # One source per optional group/version: the v1 kinds share the objects source.
    assert carrying == (["odh-training-objects"] if fw.api_version == "kubeflow.org/v1"
                        else ["odh-training-mpijobs"])
    for trigger in documents(REPO / "eventing" / "triggers.yaml"):
        assert fw.kind in trigger_kinds(trigger), trigger["metadata"]["name"]


@pytest.mark.parametrize(("path", "role", "verbs", "subresource"), [
    pytest.param("config/rbac/reconcile_role.yaml", "odh-training-reconcile",
                 {"get", "list", "watch", "patch"}, ("finalizers", {"update"}), id="reconcile"),
    pytest.param("config/rbac/status_role.yaml", "odh-training-status",
                 {"get", "list", "watch", "patch"}, ("status", {"patch"}), id="status"),
    pytest.param("config/rbac/gc_role.yaml", "odh-training-gc",
                 {"get", "list", "watch", "delete"}, None, id="gc"),
    pytest.param("config/api/rbac.yaml", "odh-training-api",
                 {"get", "list", "create", "delete"}, None, id="api"),
    pytest.param("eventing/rbac.yaml", "odh-training-events",
                 {"get", "list", "watch"}, None, id="event-source"),
])
def test_roles_grant_every_kind_the_same_verbs(path: str, role: str, verbs: set[str],
                                               subresource: tuple[str, set[str]] | None) -> None:
    rules = job_rules(REPO / path, role)
    plurals = {fw.plural for fw in FRAMEWORKS}
    whole = [r for r in rules if "/" not in r["resources"][0]]
    assert len(whole) == 1
    assert set(whole[0]["resources"]) == plurals
    assert set(whole[0]["verbs"]) == verbs
    if subresource is not None:
        name, sub_verbs = subresource
        sub = next(r for r in rules if r["resources"][0].endswith(f"/{name}"))
        assert set(sub["resources"]) == {f"{p}/{name}" for p in plurals}
        assert set(sub["verbs"]) == sub_verbs


def test_crds_and_samples_exist_for_every_kind() -> None:
    crds = yaml.safe_load((REPO / "config" / "crd" / "kustomization.yaml").read_text())
    samples = yaml.safe_load((REPO / "config" / "samples" / "kustomization.yaml").read_text())
    for fw in FRAMEWORKS:
        assert f"{fw.plural}.{GROUP}.yaml" in crds["resources"]
        assert f"{fw.kind.lower()}.yaml" in samples["resources"]
        sample = yaml.safe_load((REPO / "config" / "samples" / f"{fw.kind.lower()}.yaml")
                                .read_text())
        assert (sample["apiVersion"], sample["kind"]) == (fw.api_version, fw.kind)


def _with_true(*types: str) -> Obj:
    """A job as the informers' journal keeps it, with these conditions true."""
    return reference({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                      "metadata": {"name": "j", "namespace": "ns"},
                      "status": {"conditions": [{"type": t, "status": "True"} for t in types]
                                 + [{"type": "Running", "status": "False"}]}})


@pytest.mark.parametrize(("true", "reads"), [
    pytest.param((), {"status": False, "reconcile": False, "gc": False, "queue": False},
                 id="no-condition"),
    pytest.param(("Created", "Running"),
                 {"status": False, "reconcile": False, "gc": False, "queue": False},
                 id="created-running"),
    pytest.param(("Restarting",), {"status": False, "reconcile": True, "gc": False,
                                   "queue": False}, id="restarting"),
    pytest.param(("Succeeded",), {"status": False, "reconcile": True, "gc": True,
                                  "queue": True}, id="succeeded"),
    pytest.param(("Failed",), {"status": False, "reconcile": True, "gc": True, "queue": True},
                 id="failed"),
])
def test_which_job_status_changes_each_function_reads(true: tuple[str, ...],
                                                       reads: dict[str, bool]) -> None:
    """An event or a sweep (functions.kube.gaps) of a job's status-only change reaches a
    function's handler only when it acts on it: reconcile restarts pods and cleans up, gc and
    the queue act on an ended job, and the status function derives the status itself. An
    MPIJob's reconcile reads every status change (its hostfile follows the running workers)."""
    from functions.api.queue_controller import CONTROLLERS as QUEUE_CONTROLLERS

    ref = _with_true(*true)
    for controller in CONTROLLERS:
        functions: tuple[FunctionName, ...] = ("status", "reconcile", "gc")
        takes = {f: controller.status_inputs.get(f) for f in functions}
        found = {f: True if rule is None else rule(ref) for f, rule in takes.items()}
        expected = {f: reads[f] for f in functions}
        if controller.parent.kind == "MPIJob":
            expected["reconcile"] = True
        assert found == expected, controller.name
    for controller in QUEUE_CONTROLLERS:
        if controller.parent.group == GROUP:
            assert controller.status_inputs["reconcile"](ref) is reads["queue"], controller.name


def pod_watches(source: str | None = None) -> list[Obj]:
    """The selectors of every Pod watch of the event sources (or of ``source``)."""
    return [r.get("selector") or {} for s in documents(REPO / "eventing" / "apiserversource.yaml")
            if source in (None, s["metadata"]["name"])
            for r in s["spec"]["resources"] if (r["apiVersion"], r["kind"]) == ("v1", "Pod")]


def created_pod_labels(file: str) -> list[dict[str, str]]:
    """The labels of every pod a new job of ``file`` gets: its pods, and its launcher Job's
    pod template."""
    plan = reconcile_plan(Observed(job=fixtures.job(file)), fixtures.NOW, Settings())
    labels = []
    for obj in plan.creates:
        if obj["kind"] == "Pod":
            labels.append(obj["metadata"]["labels"])
        elif obj["kind"] == "Job":
            labels.append(obj["spec"]["template"]["metadata"]["labels"])
    return labels


@pytest.mark.parametrize("file", [pytest.param(p.name, id=p.stem)
                                  for p in sorted(fixtures.DATA.glob("*.yaml"))])
def test_every_pod_of_a_job_is_watched_exactly_once(file: str) -> None:
    """The pods are watched in halves (one watch sends one change at a time): each pod of
    every kind of job falls in exactly one, so none is missed and none is sent twice."""
    watches = pod_watches()
    labels = created_pod_labels(file)
    assert labels
    for pod_labels in labels:
        assert sum(selector_matches(w, pod_labels) for w in watches) == 1, pod_labels


def test_the_pods_are_watched_in_halves_that_a_job_of_replicas_fills() -> None:
    watches = pod_watches("odh-training-objects")
    assert len(watches) == 2
    labels = created_pod_labels("pytorch-master-workers.yaml")
    assert all(any(selector_matches(w, pod) for pod in labels) for w in watches)
