from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from devstack.core import podspec

Obj = dict[str, Any]
DATA: dict[tuple[str, str, str], dict[str, str]] = {
    ("ConfigMap", "knative-eventing", "config-logging"): {"zap": "{}", "level": "info"},
    ("Secret", "knative-eventing", "creds"): {"token": "s3cret"},
}


def lookup(kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
    return DATA.get((kind, namespace, name))


POD: Obj = {
    "metadata": {"name": "adapter-x", "namespace": "knative-eventing", "uid": "u-1",
                 "labels": {"app": "adapter"}},
    "spec": {"nodeName": "kwok-cpu-0", "serviceAccountName": "controller"},
    "status": {"podIP": "10.244.0.9"},
}


@pytest.mark.parametrize(("container", "expected"), [
    pytest.param({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "$(A)-$$(A)-$(C)"}]},
                 {"A": "1", "B": "1-$(A)-$(C)"}, id="expansion-escape-unknown"),
    pytest.param({"env": [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}]},
        {"POD": "adapter-x", "IP": "10.244.0.9", "APP": "adapter"}, id="downward-api"),
    pytest.param({"env": [
        {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "config-logging",
                                                            "key": "level"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "none", "key": "k",
                                                        "optional": True}}}]},
        {"LEVEL": "info", "TOKEN": "s3cret"}, id="key-refs-and-optional"),
    pytest.param({"envFrom": [{"configMapRef": {"name": "config-logging"}, "prefix": "L_"}],
                  "env": [{"name": "L_level", "value": "debug"}]},
                 {"L_zap": "{}", "L_level": "debug"}, id="env-from-then-env-wins"),
])
def test_container_env(container: Obj, expected: dict[str, str]) -> None:
    assert podspec.container_env(POD, container, lookup) == expected


@pytest.mark.parametrize("container", [
    pytest.param({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {
        "name": "config-logging", "key": "missing"}}}]}, id="missing-key"),
    pytest.param({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {
        "name": "none", "key": "k"}}}]}, id="missing-secret"),
    pytest.param({"env": [{"name": "X", "valueFrom": {"fieldRef": {
        "fieldPath": "spec.hostname"}}}]}, id="unsupported-field"),
    pytest.param({"env": [{"name": "X", "valueFrom": {"resourceFieldRef": {
        "resource": "limits.cpu"}}}]}, id="unsupported-source"),
    pytest.param({"envFrom": [{"secretRef": {"name": "none"}}]}, id="missing-env-from"),
])
def test_container_env_refused(container: Obj) -> None:
    with pytest.raises(podspec.PodSpecError):
        podspec.container_env(POD, container, lookup)


@pytest.mark.parametrize(("pod", "expected"), [
    pytest.param({"spec": {"containers": [
        {"image": "ko://knative.dev/eventing/cmd/broker/filter"}]}}, "broker_filter",
        id="knative-image"),
    pytest.param({"spec": {"containers": [{"image": "quay.io/x/y:1"}]}}, None,
                 id="other-image"),
    pytest.param({"spec": {"containers": [
        {"image": "ko://knative.dev/eventing/cmd/mtping"}, {"image": "sidecar"}]}}, None,
        id="two-containers"),
    pytest.param({"spec": {"initContainers": [{"image": "init"}], "containers": [
        {"image": "ko://knative.dev/eventing/cmd/mtping"}]}}, None, id="init-container"),
])
def test_binary_for(pod: Obj, expected: str | None) -> None:
    assert podspec.binary_for(pod) == expected


@pytest.mark.parametrize(("container", "expected"), [
    pytest.param({}, None, id="none"),
    pytest.param({"ports": [{"name": "http-health", "containerPort": 8080}],
                  "readinessProbe": {"httpGet": {"port": "http-health", "path": "readyz"},
                                     "periodSeconds": 2}},
                 podspec.Probe(port=8080, path="/readyz", period=2.0), id="named-port"),
    pytest.param({"readinessProbe": {"httpGet": {"port": 8443, "scheme": "HTTPS",
                                                 "httpHeaders": [{"name": "k-kubelet-probe",
                                                                  "value": "webhook"}]},
                                     "failureThreshold": 1}},
                 podspec.Probe(port=8443, scheme="HTTPS",
                               headers=(("k-kubelet-probe", "webhook"),),
                               failure_threshold=1), id="https-headers"),
])
def test_readiness_probe(container: Obj, expected: podspec.Probe | None) -> None:
    assert podspec.readiness_probe(container) == expected


@pytest.mark.parametrize("container", [
    pytest.param({"readinessProbe": {"exec": {"command": ["true"]}}}, id="exec"),
    pytest.param({"readinessProbe": {"httpGet": {"port": "nope"}}}, id="unknown-port-name"),
])
def test_readiness_probe_refused(container: Obj) -> None:
    with pytest.raises(podspec.PodSpecError):
        podspec.readiness_probe(container)


@pytest.mark.parametrize("container", [
    pytest.param({"command": ["/bin/sh"]}, id="ko-image"),
    pytest.param({"image": podspec.JOBSET_IMAGE, "command": ["/bin/sh", "-c", "/manager"]},
                 id="other-than-the-image-entrypoint"),
])
def test_a_command_replacing_the_entrypoint_is_refused(container: Obj) -> None:
    with pytest.raises(podspec.PodSpecError):
        podspec.container_args(container, {})


@pytest.mark.parametrize(("container", "args"), [
    pytest.param({"image": podspec.JOBSET_IMAGE, "command": ["/manager"],
                  "args": ["--config=/c.yaml"]}, ["--config=/c.yaml"], id="entrypoint-named"),
    pytest.param({"image": podspec.JOBSET_IMAGE, "command": ["/manager", "--zap-devel"],
                  "args": ["--x=$(X)"]}, ["--zap-devel", "--x=1"], id="entrypoint-with-words"),
    pytest.param({"image": podspec.TRAINER_IMAGE, "args": ["--config=/c.yaml"]},
                 ["--config=/c.yaml"], id="no-command"),
])
def test_a_command_that_is_the_image_entrypoint(container: Obj, args: list[str]) -> None:
    assert podspec.container_args(container, {"X": "1"}) == args


@pytest.mark.parametrize(("restarts", "seconds"), [
    pytest.param(0, 0.0, id="first-start"),
    pytest.param(1, 10.0, id="first-restart"),
    pytest.param(3, 40.0, id="doubling"),
    pytest.param(20, 300.0, id="capped"),
])
def test_backoff(restarts: int, seconds: float) -> None:
    assert podspec.backoff(restarts) == seconds


def test_container_args_expand_env() -> None:
    container = {"args": ["--port=$(PORT)", "$(UNKNOWN)"]}
    assert podspec.container_args(container, {"PORT": "8080"}) == ["--port=8080",
                                                                    "$(UNKNOWN)"]


@pytest.mark.parametrize(("state", "phase_state", "ready"), [
    pytest.param(podspec.ContainerState(started_at="t1", ready=True, restarts=0),
                 "running", "True", id="running-ready"),
    pytest.param(podspec.ContainerState(started_at=None, ready=False, restarts=2,
                                        last_exit=1, last_finished_at="t2"),
                 "waiting", "False", id="crash-loop"),
])
def test_pod_status(state: podspec.ContainerState, phase_state: str, ready: str) -> None:
    pod = {**POD, "spec": {**POD["spec"], "containers": [{"name": "c", "image": "i"}]},
           "status": {"conditions": [{"type": "Ready", "status": ready,
                                      "lastTransitionTime": "t0"}]}}
    status = podspec.pod_status(pod, state, pod_ip="10.244.0.9", host_ip="10.240.0.1",
                                start_time="t0", now="t9")
    [container] = status["containerStatuses"]
    assert phase_state in container["state"]
    assert container["restartCount"] == state.restarts
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"] == {"type": "Ready", "status": ready,
                                   "lastTransitionTime": "t0"}  # unchanged: kept
    assert conditions["ContainersReady"]["lastTransitionTime"] == "t9"
    if state.last_exit is not None:
        assert container["lastState"]["terminated"]["exitCode"] == state.last_exit
