"""Every kustomization builds, and what it builds hangs together: Services, identities,
Triggers and sinks that name each other exist, and each Knative Service is configured as
config/serving promises (cluster-local, bounded, probed, restricted)."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.__main__ import build_parser
from functions.core.delivery import DeliverySpec
from functions.core.delivery_auth import FUNCTION_LABEL, SERVICE_NAMES, audience_for
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.runtime.serve import default_threads
from functions.trainer.core import params
from tests.deploy.support import (
    FUNCTIONS,
    INSTALLS,
    KUSTOMIZATIONS,
    REPO,
    build,
    find,
    knative_service,
)

Obj = dict[str, Any]
RESTRICTED = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
              "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}
RELATED_IMAGES = sorted({*params.TRAINER_IMAGE_PARAMS.values(),
                         *params.RUNTIME_IMAGE_PARAMS.values(),
                         *params.IMAGESTREAM_PARAMS.values()})


@pytest.fixture(scope="module")
def builds(bin_dir: Path) -> dict[str, list[Obj]]:
    return {directory: build(bin_dir / "kustomize", directory) for directory in KUSTOMIZATIONS}


def _id(obj: Obj) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_builds_named_unique_objects(builds: dict[str, list[Obj]], directory: str) -> None:
    objs = builds[directory]
    assert objs
    duplicates = [key for key, n in Counter(_id(o) for o in objs).items() if n > 1]
    assert duplicates == []


@pytest.mark.parametrize("directory", INSTALLS)
def test_bindings_name_service_accounts_of_the_same_install(
        builds: dict[str, list[Obj]], directory: str) -> None:
    objs = builds[directory]
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs
                if o["kind"] == "ServiceAccount"}
    subjects = {(s["namespace"], s["name"]) for o in objs
                if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
                for s in o["subjects"] if s["kind"] == "ServiceAccount"}
    assert subjects
    assert subjects - accounts == set()
    roles = {o["metadata"]["name"] for o in objs if o["kind"] in ("ClusterRole", "Role")}
    assert {o["roleRef"]["name"] for o in objs
            if o["kind"] in ("ClusterRoleBinding", "RoleBinding")} <= roles


@pytest.mark.parametrize("directory", INSTALLS)
def test_every_pod_identity_exists(builds: dict[str, list[Obj]], directory: str) -> None:
    objs = builds[directory]
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    used = {o["spec"]["template"]["spec"]["serviceAccountName"] for o in objs
            if o["apiVersion"].startswith("serving.knative.dev/")}
    used |= {o["spec"]["serviceAccountName"] for o in objs if o["kind"] == "ApiServerSource"}
    assert used
    assert used <= accounts


@pytest.mark.parametrize("directory", ["config/default", "config/overlays/openshift"])
def test_triggers_and_dead_letters_reach_existing_services(
        builds: dict[str, list[Obj]], directory: str) -> None:
    objs = builds[directory]
    services = {o["metadata"]["name"] for o in objs
                if o["apiVersion"].startswith("serving.knative.dev/")}
    subscribers = {o["spec"]["subscriber"]["ref"]["name"] for o in objs if o["kind"] == "Trigger"}
    assert subscribers == {f"odh-training-{fn}" for fn in FUNCTIONS}
    assert subscribers <= services
    sink = find(objs, "Broker", "odh-training")["spec"]["delivery"]["deadLetterSink"]["ref"]
    if directory == "config/overlays/openshift":  # durable: a Kafka topic
        assert sink["kind"] == "KafkaSink"
        assert find(objs, "KafkaSink", sink["name"])["spec"]["contentMode"] == "structured"
        assert "odh-training-dead-letters" not in services
    else:
        assert sink["kind"] == "Service" and sink["name"] in services


def test_func_install_leaves_the_function_services_to_func(
        builds: dict[str, list[Obj]]) -> None:
    objs = builds["config/func"]
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "Trigger"] == [
        "odh-training-functions"]
    assert {o["metadata"]["name"] for o in objs
            if o["apiVersion"].startswith("serving.knative.dev/")} == {"odh-training-dead-letters"}
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    assert accounts == {"odh-training-functions", "odh-training-events",
                        "odh-training-dead-letters"}
    functions_bound = {o["roleRef"]["name"] for o in objs
                       if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
                       and o["subjects"] == [{"kind": "ServiceAccount",
                                              "name": "odh-training-functions",
                                              "namespace": "opendatahub"}]}
    assert functions_bound == {"odh-training-reconcile", "odh-training-reconcile-delegated",
                               "odh-training-gc", "odh-training-status",
                               "odh-training-reconcile-lease", "odh-training-delivery-auth",
                               "odh-training-lifecycle", "odh-training-gc-token",
                               "odh-training-status-token", "odh-training-wakes"}
    # the lifecycle's tokens are its own account's
    assert {tuple(o["rules"][0]["resourceNames"]) for o in objs if o["kind"] == "Role"
            and o["metadata"]["name"].endswith("-token")} == {("odh-training-functions",)}


@pytest.mark.parametrize("directory", INSTALLS)
def test_every_trigger_names_the_audience_its_function_checks(
        builds: dict[str, list[Obj]], directory: str) -> None:
    """Knative Serving's Services publish no OIDC audience, so each Trigger names it: the one
    the function derives from its namespace and its Service's name (functions.core.
    delivery_auth.settings_from), labelled with the function whose Triggers it belongs to."""
    objs = builds[directory]
    triggers = [o for o in objs if o["kind"] == "Trigger"]
    assert triggers
    for trigger in triggers:
        subscriber = trigger["spec"]["subscriber"]
        assert subscriber["audience"] == audience_for(trigger["metadata"]["namespace"],
                                                      subscriber["ref"]["name"])
        label = trigger["metadata"]["labels"][FUNCTION_LABEL]
        assert subscriber["ref"]["name"] == SERVICE_NAMES[label]


@pytest.mark.parametrize("directory", ["config/default", "config/func"])
def test_the_dead_letter_sink_is_named_with_its_audience(
        builds: dict[str, list[Obj]], directory: str) -> None:
    sink = find(builds[directory], "Broker", "odh-training")["spec"]["delivery"]["deadLetterSink"]
    assert sink["audience"] == audience_for("opendatahub", sink["ref"]["name"])


def test_the_audiences_follow_the_namespace_of_the_openshift_overlay(
        bin_dir: Path, tmp_path: Path) -> None:
    """Red Hat OpenShift AI sets another namespace in the overlay: the Triggers' audiences
    follow it, as the functions derive theirs from the namespace they run in."""
    overlay = REPO / "config" / "overlays" / "openshift"
    copy = tmp_path / "overlay"
    shutil.copytree(overlay, copy)
    kustomization = yaml.safe_load((copy / "kustomization.yaml").read_text())
    kustomization["namespace"] = "redhat-ods-applications"
    kustomization["resources"] = [
        os.path.relpath(overlay / r, copy) if r.startswith("..") else r
        for r in kustomization["resources"]]
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    triggers = [o for o in build(bin_dir / "kustomize", copy) if o["kind"] == "Trigger"]
    assert {t["spec"]["subscriber"]["audience"] for t in triggers} == {
        audience_for("redhat-ods-applications", f"odh-training-{fn}") for fn in FUNCTIONS}


@pytest.mark.parametrize("directory", ["config/default", "config/overlays/openshift"])
def test_every_delivery_times_out_before_its_function_would(
        builds: dict[str, list[Obj]], directory: str) -> None:
    """Each Trigger's delivery (its own, else the Broker's) has a timeout, shorter than the
    request timeout of the Service it delivers to: a longer one would never take effect, and
    a hung attempt would hold its delivery until Knative Serving cut it."""
    objs = builds[directory]
    broker = DeliverySpec.from_spec(find(objs, "Broker", "odh-training")["spec"].get("delivery"))
    triggers = [o for o in objs if o["kind"] == "Trigger"]
    assert len(triggers) == len(FUNCTIONS)
    for trigger in triggers:
        delivery = DeliverySpec.from_spec(trigger["spec"].get("delivery"), broker)
        service = knative_service(objs, trigger["spec"]["subscriber"]["ref"]["name"])
        revision_timeout = service["spec"]["template"]["spec"].get("timeoutSeconds", 300)
        assert delivery.timeout is not None, trigger["metadata"]["name"]
        assert delivery.timeout < revision_timeout, trigger["metadata"]["name"]


@pytest.mark.parametrize("directory", INSTALLS)
def test_the_training_api_is_opt_in(builds: dict[str, list[Obj]], directory: str) -> None:
    names = {o["metadata"]["name"] for o in builds[directory]}
    assert not {n for n in names if n.startswith("odh-training-api")}
    api = {(o["kind"], o["metadata"]["name"]) for o in builds["config/api"]}
    assert ("Service", "odh-training-api") in api and ("ClusterRole", "odh-training-api") in api


def test_openshift_overlay_uses_the_kafka_broker(builds: dict[str, list[Obj]]) -> None:
    broker = find(builds["config/overlays/openshift"], "Broker", "odh-training")
    assert broker["metadata"]["annotations"]["eventing.knative.dev/broker.class"] == "Kafka"
    assert broker["spec"]["config"]["name"] == "kafka-broker-config"
    assert broker["spec"]["delivery"]["retry"] == 10
    default_broker = find(builds["config/default"], "Broker", "odh-training")
    assert "eventing.knative.dev/broker.class" not in (
        default_broker["metadata"].get("annotations") or {})


def test_openshift_overlay_scrapes_every_function(builds: dict[str, list[Obj]]) -> None:
    """User-workload monitoring scrapes /metrics on the port Knative gives the function's
    container in its pods, for the pods of every function and nothing else."""
    objs = builds["config/overlays/openshift"]
    monitor = find(objs, "PodMonitor", "odh-training-functions")
    assert monitor["metadata"]["namespace"] == "opendatahub"
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "user-port", "path": "/metrics", "interval": "30s", "scheme": "http"}]
    [term] = monitor["spec"]["selector"]["matchExpressions"]
    assert (term["key"], term["operator"]) == ("functions.opendatahub.io/function", "In")
    assert sorted(term["values"]) == sorted(FUNCTIONS)
    for function in FUNCTIONS:
        labels = knative_service(objs, f"odh-training-{function}")["spec"]["template"][
            "metadata"]["labels"]
        assert labels[term["key"]] == function
    assert not [o for o in builds["config/default"] if o["kind"] == "PodMonitor"]


def _container(ksvc: Obj) -> Obj:
    [container] = ksvc["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize("function", FUNCTIONS)
def test_function_service_settings(builds: dict[str, list[Obj]], function: str) -> None:
    ksvc = knative_service(builds["config/default"], f"odh-training-{function}")
    template = ksvc["spec"]["template"]
    spec = template["spec"]
    container = _container(ksvc)
    annotations = template["metadata"]["annotations"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ksvc["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    assert spec["containerConcurrency"] == int(env["THREADS"]) > 0
    # `make dev` and the benchmark serve with the defaults: they must be what is deployed.
    assert int(env["THREADS"]) == default_threads(function)
    # Due times outlive a function as wakes (functions/core/wakes.py): each scales to zero.
    assert int(annotations["autoscaling.knative.dev/min-scale"]) == 0
    assert int(annotations["autoscaling.knative.dev/max-scale"]) >= 1
    assert 0 < spec["timeoutSeconds"] <= 600
    assert spec["serviceAccountName"] == f"odh-training-{function}"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/readiness"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/liveness"
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert {"cpu", "memory"} <= container["resources"]["limits"].keys()
    args = build_parser(container["args"]).parse_args(container["args"])
    assert (args.command, args.function) == ("serve", function)


@pytest.mark.parametrize("name", [*(f"odh-training-{fn}" for fn in FUNCTIONS),
                                  "odh-training-dead-letters"])
def test_restricted_security_context_with_writable_scratch(
        builds: dict[str, list[Obj]], name: str) -> None:
    ksvc = knative_service(builds["config/default"], name)
    spec = ksvc["spec"]["template"]["spec"]
    container = _container(ksvc)
    context = container["securityContext"]
    assert {k: context.get(k) for k in RESTRICTED} == RESTRICTED
    assert "runAsUser" not in context and "securityContext" not in spec  # OpenShift picks
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
    assert all("emptyDir" in volumes[n] for n in mounts.values())
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    for variable in ("HOME", "TRAINER_WORK_DIR"):
        if variable in env:
            assert env[variable] in mounts, f"{variable} is not on a writable volume"


def test_reconcile_takes_every_related_image(builds: dict[str, list[Obj]]) -> None:
    env = {e["name"] for e in _container(knative_service(
        builds["config/default"], "odh-training-reconcile"))["env"]}
    assert sorted(name for name in env if name.startswith("RELATED_IMAGE_")) == RELATED_IMAGES
    assert "TRAINER_WORK_DIR" in env


def test_dead_letter_sink_is_served_like_the_functions(builds: dict[str, list[Obj]]) -> None:
    ksvc = knative_service(builds["config/default"], "odh-training-dead-letters")
    container = _container(ksvc)
    args = build_parser(container["args"]).parse_args(container["args"])
    assert (args.command, args.function) == ("serve", "dead-letters")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ksvc["spec"]["template"]["spec"]["containerConcurrency"] == int(env["THREADS"])
    assert 0 < int(env["DEAD_LETTER_MAX_BYTES"]) <= 3 * 1024 * 1024
    assert 0 < int(env["DEAD_LETTER_EXCERPT_BYTES"]) <= 4096
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/readiness"


def _containers(obj: Obj) -> list[Obj]:
    specs = (obj.get("spec") or {}).get("mpiReplicaSpecs") or {}
    for key, value in (obj.get("spec") or {}).items():
        if key.endswith("ReplicaSpecs") and isinstance(value, dict):
            specs = {**specs, **value}
    return [c for spec in specs.values()
            for c in spec["template"]["spec"]["containers"]]


def test_samples_run_under_restricted_v2(builds: dict[str, list[Obj]]) -> None:
    """OpenShift's restricted-v2 SCC refuses a fixed UID: no sample sets one."""
    jobs = [o for o in builds["config/samples"] if o["kind"].endswith("Job")]
    assert {o["kind"] for o in jobs} == {fw.kind for fw in FRAMEWORKS}
    fixed = [(o["kind"], c["name"]) for o in jobs for c in _containers(o)
             if "runAsUser" in (c.get("securityContext") or {})]
    assert fixed == []


def test_sample_trainer_deploys_into_the_install_namespace(
        builds: dict[str, list[Obj]]) -> None:
    trainer = find(builds["config/samples"], "Trainer", "default-trainer")
    functions = knative_service(builds["config/default"], "odh-training-reconcile")
    assert trainer["spec"]["appNamespace"] == functions["metadata"]["namespace"]
