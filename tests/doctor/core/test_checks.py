"""The platform, network, JobSet, source and readiness checks; each passing and failing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from functions.doctor.core import checks
from functions.doctor.core.model import Finding, Snapshot, Status
from functions.platform.core.coexistence import Crd, DscComponent, Platform, Workload
from tests.doctor.snapshots import SERVED, SERVERLESS, deny_all, healthy, ready, with_

Check = Callable[[Snapshot], Finding]
BASE = healthy()
TRAINER_OPERATOR = Workload(namespace="redhat-ods-applications",
                            name="trainer-operator-controller-manager")
MPIJOB_SOURCE = {**ready("ApiServerSource", "odh-training-mpijobs"),
                 "spec": {"resources": [{"apiVersion": "kubeflow.org/v2beta1",
                                         "kind": "MPIJob"}]}}


@pytest.mark.parametrize(("check", "snapshot", "status", "words"), [
    pytest.param(checks.platform_trainer, BASE, Status.PASS, "no other controller",
                 id="trainer-alone"),
    pytest.param(checks.platform_trainer, with_(BASE, platform=Platform(
        trainer_operators=(TRAINER_OPERATOR,))), Status.FAIL, "trainer-operator",
                 id="trainer-operator-runs"),
    pytest.param(checks.platform_trainer, with_(BASE, platform=Platform(dsc=(DscComponent(
        cluster="default-dsc", component="trainer", management_state="Managed"),))),
                 Status.FAIL, "DataScienceCluster default-dsc", id="dsc-trainer-managed"),
    pytest.param(checks.platform_jobs, BASE, Status.PASS, "no other controller",
                 id="jobs-alone"),
    pytest.param(checks.platform_jobs, with_(BASE, platform=Platform(crds={
        "mpijobs.kubeflow.org": Crd(name="mpijobs.kubeflow.org", served=("v1",))})),
                 Status.FAIL, "serves v1, not v2beta1", id="mpijobs-v1-only"),
    pytest.param(checks.jobset, BASE, Status.PASS, "served", id="jobset-installed"),
    pytest.param(checks.jobset, with_(BASE, served=SERVED - {"jobset.x-k8s.io/v1alpha2/jobsets"}),
                 Status.FAIL, "not installed", id="jobset-missing"),
    pytest.param(checks.network_policies, BASE, Status.PASS, "admitted",
                 id="netpol-admits-knative"),
    pytest.param(checks.network_policies, with_(BASE, network_policies=()), Status.PASS,
                 "no NetworkPolicy isolates", id="netpol-none"),
    pytest.param(checks.network_policies, with_(BASE, network_policies=(deny_all(),)),
                 Status.FAIL, "block", id="netpol-platform-deny-only"),
    pytest.param(checks.network_policies, with_(BASE, namespaces={
        "knative-serving": {"kubernetes.io/metadata.name": "knative-serving"}}), Status.FAIL,
                 "block", id="netpol-namespace-without-serverless-label"),
    pytest.param(checks.network_policies, with_(BASE, network_policies=None), Status.SKIP,
                 "not readable", id="netpol-unreadable"),
    pytest.param(checks.network_policies, with_(BASE, namespaces={}), Status.SKIP,
                 "no Knative namespace", id="netpol-no-knative"),
    pytest.param(checks.event_sources, BASE, Status.PASS, "served", id="sources-served"),
    pytest.param(checks.event_sources, with_(BASE, installed={
        "ApiServerSource": (MPIJOB_SOURCE,)}, served=SERVED - {"kubeflow.org/v2beta1/mpijobs"}),
                 Status.FAIL, "does not serve", id="sources-mpijob-unserved"),
    pytest.param(checks.event_sources, with_(BASE, installed={}), Status.SKIP, "no Api",
                 id="sources-not-installed"),
    pytest.param(checks.event_path, BASE, Status.PASS, "Ready", id="path-ready"),
    pytest.param(checks.event_path, with_(BASE, installed={
        "Broker": (ready("Broker", "odh-training", "False"),)}), Status.FAIL, "not Ready",
                 id="path-broker-not-ready"),
    pytest.param(checks.event_path, with_(BASE, installed={
        "Trigger": ({"metadata": {"name": "odh-training-gc"}},)}), Status.FAIL, "not Ready",
                 id="path-no-conditions-yet"),
    pytest.param(checks.event_path, with_(BASE, installed={}), Status.SKIP, "not installed",
                 id="path-not-installed"),
    pytest.param(checks.trainer, BASE, Status.PASS, "Ready", id="trainer-ready"),
    pytest.param(checks.trainer, with_(BASE, installed={
        "Trainer": (ready("Trainer", "default-trainer", "False"),)}), Status.FAIL,
                 "not Ready", id="trainer-not-ready"),
    pytest.param(checks.trainer, with_(BASE, installed={}), Status.SKIP, "no Trainer",
                 id="trainer-absent"),
    pytest.param(checks.trainer, with_(BASE, installed={"Trainer": (
        {**ready("Trainer", "default-trainer"), "spec": {"appNamespace": "elsewhere"}},)}),
                 Status.FAIL, "deploys into elsewhere", id="trainer-other-namespace"),
    pytest.param(checks.trainer, with_(BASE, namespace="redhat-ods-applications"),
                 Status.FAIL, "deploys into opendatahub", id="trainer-default-namespace"),
])
def test_checks(check: Check, snapshot: Snapshot, status: Status, words: str) -> None:
    finding = check(snapshot)
    assert finding.status is status, finding
    assert words in finding.summary
    assert finding.status in (Status.PASS, Status.SKIP) or finding.fix


def test_blocked_deliveries_are_named() -> None:
    finding = checks.network_policies(with_(BASE, network_policies=(deny_all(),)))
    assert "knative-serving -> odh-training-reconcile" in finding.details
    assert "knative.openshift.io/part-of=openshift-serverless" in finding.fix


def test_receivers_before_install_carry_the_serving_labels() -> None:
    found = checks.receivers(with_(BASE, installed={}))
    assert set(found) == set(checks.RECEIVERS)
    assert all(labels["app.kubernetes.io/part-of"] == "odh-training"
               for labels in found.values())


def test_a_healthy_cluster_passes_every_check() -> None:
    findings = checks.run(BASE)
    assert [f.check for f in findings if f.status is not Status.PASS] == []
    assert not checks.failed(findings)


@pytest.mark.parametrize("breakage", [
    pytest.param({"served": frozenset()}, id="nothing-served"),
    pytest.param({"network_policies": (deny_all(),)}, id="blocked"),
    pytest.param({"namespaces": {"knative-serving": {}, **{"x": SERVERLESS}}}, id="unlabelled"),
])
def test_any_failure_fails_the_run(breakage: dict[str, object]) -> None:
    assert checks.failed(checks.run(with_(BASE, **breakage)))
