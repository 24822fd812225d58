"""Event coverage: a kind a controller maps to a parent (its own kind and its children's) gives
the functions work on its events only if an ApiServerSource in ``eventing/`` watches it;
otherwise a change to it waits for the resync.

The kinds come from the controllers' registry, the sources from ``eventing/``. The kinds no
source watches yet are held to :data:`KNOWN_GAPS`, each with why: a newly mapped kind that no
source watches fails here, and so does a gap that a source now covers but that is still listed.
Only the sources are checked here, not the Triggers' filters (ConfigMaps, for one, are watched
in the operand namespace, but only the platform ConfigMap's events pass the reconcile Trigger).
That the created objects match the sources' selectors is proven end to end
(``tests/dev/e2e/test_event_path.py``: each job's recorded events name every child kind it maps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from functions.core.triggers import compile_trigger_filter
from functions.runtime.app import NOT_SENT
from functions.runtime.eventing import load_manifests
from functions.runtime.registry import load_controllers

REPO = Path(__file__).resolve().parents[2]
EVENTING = REPO / "eventing"

# (group, kind) -> why no ApiServerSource watches it (yet): such changes wait for the resync.
KNOWN_GAPS: dict[tuple[str, str], str] = {
    ("", "Secret"): "Trainer children (labelled), left to the resync by choice: a source for "
                    "them would let the adapters' ServiceAccount read every Secret of the "
                    "namespace (RBAC cannot grant by label), even in Reference mode",
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"):
        "Trainer children (labelled): their CRD comes with the Trainer, after the adapter "
        "started, and v0.49.2's adapter skips a kind it could not discover at start",
    ("operator.openshift.io", "JobSetOperator"): "OpenShift only: a source for it fails to "
                                                 "watch on other clusters",
    ("autoscaling", "HorizontalPodAutoscaler"): "elastic PyTorchJobs: the HPA carries no "
                                                "job-name label to select it by",
    ("scheduling.volcano.sh", "PodGroup"): "optional: config/components/gang-scheduling adds "
                                           "it to a source where Volcano is installed",
    ("scheduling.x-k8s.io", "PodGroup"): "optional: config/components/gang-scheduling adds it "
                                         "to a source where scheduler-plugins is installed",
    ("trainer.kubeflow.org", "TrainJob"): "optional: config/components/trainjobs adds a "
                                          "source for them where the Trainer is Managed",
}


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def mapped_kinds() -> dict[tuple[str, str], set[str]]:
    """(group, kind) -> the controllers that map it to a parent."""
    found: dict[tuple[str, str], set[str]] = {}
    for controller in load_controllers():
        found.setdefault((controller.parent.group, controller.parent.kind), set()).add(
            controller.name)
        for child in controller.children:
            found.setdefault((_group(child.api_version), child.kind), set()).add(
                controller.name)
    return found


def watched_kinds() -> set[tuple[str, str]]:
    return {(_group(str(r["apiVersion"])), str(r["kind"]))
            for source in load_manifests(EVENTING).apiserver_sources
            for r in (source.get("spec") or {}).get("resources") or []}


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"{k[0] or 'core'}/{k[1]}")
                                  for k in sorted(mapped_kinds())])
def test_every_mapped_kind_is_watched_or_a_known_gap(kind: tuple[str, str]) -> None:
    watched = kind in watched_kinds()
    if kind in KNOWN_GAPS:
        assert not watched, f"{kind} is watched now: take it off KNOWN_GAPS"
    else:
        assert watched, (f"{kind} (mapped by {sorted(mapped_kinds()[kind])}) is in no "
                         "ApiServerSource of eventing/: its changes would wait for the resync")


def test_known_gaps_are_kinds_a_controller_maps() -> None:
    assert set(KNOWN_GAPS) <= set(mapped_kinds())


def test_every_parent_kind_is_watched_unless_a_known_gap() -> None:
    parents = {(c.parent.group, c.parent.kind) for c in load_controllers()}
    assert parents - set(KNOWN_GAPS) <= watched_kinds()


OPTIONAL = [pytest.param(kind, why.split()[1], id=f"{kind[0]}/{kind[1]}")
            for kind, why in sorted(KNOWN_GAPS.items()) if why.startswith("optional: ")]


def _trigger_takes(function: str, kind: str) -> bool:
    [trigger] = [t for t in load_manifests(EVENTING).triggers
                 if t["metadata"]["name"] == f"odh-training-{function}"]
    return compile_trigger_filter(trigger["spec"]).matches(
        {"type": "dev.knative.apiserver.resource.add", "kind": kind, "controller": "odh-training"})


@pytest.mark.parametrize(("kind", "component"), OPTIONAL)
def test_an_optional_source_watches_its_kind_and_reconcile_takes_it(
        kind: tuple[str, str], component: str) -> None:
    """A gap said to be closed by an optional component is: the component's ApiServerSource
    watches the kind, sends to the Broker of eventing/, and the reconcile Trigger takes it."""
    sources = load_manifests(REPO / component).apiserver_sources
    assert sources, f"{component} has no ApiServerSource"
    assert kind in {(_group(str(r["apiVersion"])), str(r["kind"])) for source in sources
                    for r in source["spec"]["resources"]}
    [broker] = load_manifests(EVENTING).brokers
    for source in sources:
        assert source["spec"]["sink"]["ref"]["name"] == broker["metadata"]["name"]
        assert source["metadata"]["namespace"] == broker["metadata"]["namespace"]
    assert _trigger_takes("reconcile", kind[1])



def _cached_kinds(function: str) -> set[str]:
    return {spec.resource.kind for controller in load_controllers()
            for spec in controller.cached.get(function, ())}  # type: ignore[call-overload]


@pytest.mark.parametrize(("function", "kind", "operation"), [
    pytest.param(function, kind, operation, id=f"{function}-{kind}-{operation}")
    for function in ("reconcile", "status", "gc") for kind in sorted(_cached_kinds(function))
    for operation in ("add", "update", "delete")])
def test_not_sent_names_exactly_what_a_functions_trigger_leaves_out(
        function: str, kind: str, operation: str) -> None:
    """After a watch gap a function skips the changes its Trigger never sends it
    (:data:`functions.runtime.app.NOT_SENT`): that table must agree with the Trigger."""
    [trigger] = [t for t in load_manifests(EVENTING).triggers
                 if t["metadata"]["name"] == f"odh-training-{function}"]
    sent = compile_trigger_filter(trigger["spec"]).matches(
        {"type": f"dev.knative.apiserver.resource.{operation}", "kind": kind,
         "name": "x", "namespace": "ns", "controller": "odh-training"})
    assert sent == ((kind, operation) not in NOT_SENT.get(function, frozenset()))
