from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from devstack.core import volumes

Obj = dict[str, Any]
DATA: dict[tuple[str, str, str], dict[str, bytes]] = {
    ("ConfigMap", "ns", "config"): {"controller_manager_config.yaml": b"kind: Configuration",
                                    "other": b"x"},
    ("Secret", "ns", "cert"): {"tls.crt": b"CRT", "tls.key": b"KEY"},
}


def lookup(kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
    return DATA.get((kind, namespace, name))


def pod(*volume_list: Obj) -> Obj:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"volumes": list(volume_list)}}


CONFIG = {"name": "config", "configMap": {"name": "config"}}
CERT = {"name": "cert", "secret": {"secretName": "cert", "defaultMode": 420}}


@pytest.mark.parametrize(("volume_list", "mount_list", "initial", "expected"), [
    pytest.param([CONFIG], [{"name": "config", "mountPath": "/controller_manager_config.yaml",
                             "subPath": "controller_manager_config.yaml"}], True,
                 {"/controller_manager_config.yaml": b"kind: Configuration"},
                 id="sub-path-file"),
    pytest.param([CONFIG], [{"name": "config", "mountPath": "/c.yaml", "subPath": "other"}],
                 False, {}, id="sub-path-never-follows"),
    pytest.param([CERT], [{"name": "cert", "mountPath": "/tmp/certs/"}], False,
                 {"/tmp/certs/tls.crt": b"CRT", "/tmp/certs/tls.key": b"KEY"},
                 id="whole-secret-follows"),
    pytest.param([{"name": "cert", "secret": {"secretName": "cert",
                                              "items": [{"key": "tls.crt", "path": "a/ca"}]}}],
                 [{"name": "cert", "mountPath": "/s"}], True, {"/s/a/ca": b"CRT"}, id="items"),
    pytest.param([{"name": "gone", "secret": {"secretName": "gone", "optional": True}}],
                 [{"name": "gone", "mountPath": "/s"}], True, {}, id="optional-missing"),
    pytest.param([{"name": "scratch", "emptyDir": {}}], [{"name": "scratch", "mountPath": "/w"}],
                 True, {}, id="empty-dir"),
])
def test_layout(volume_list: list[Obj], mount_list: list[Obj], initial: bool,
                expected: dict[str, bytes]) -> None:
    container = {"volumeMounts": mount_list}
    assert volumes.layout(pod(*volume_list), container, lookup, initial=initial) == expected


@pytest.mark.parametrize(("volume_list", "mount_list", "message"), [
    pytest.param([{"name": "gone", "secret": {"secretName": "gone"}}],
                 [{"name": "gone", "mountPath": "/s"}], "not found", id="secret-missing"),
    pytest.param([CONFIG], [{"name": "config", "mountPath": "/c", "subPath": "nope"}],
                 "has no 'nope'", id="sub-path-missing"),
    pytest.param([], [{"name": "config", "mountPath": "/c"}], "no volume", id="undeclared"),
    pytest.param([{"name": "h", "hostPath": {"path": "/"}}], [{"name": "h", "mountPath": "/h"}],
                 "not supported", id="host-path"),
    pytest.param([CONFIG], [{"name": "config", "mountPath": "relative"}], "not absolute",
                 id="relative-mount"),
    pytest.param([CONFIG], [{"name": "config", "mountPath": "/a/../etc"}], "leaves",
                 id="dot-dot"),
    pytest.param([{"name": "cert", "secret": {"secretName": "cert",
                                              "items": [{"key": "tls.crt", "path": "../x"}]}}],
                 [{"name": "cert", "mountPath": "/s"}], "outside", id="item-leaves"),
])
def test_layout_refused(volume_list: list[Obj], mount_list: list[Obj], message: str) -> None:
    with pytest.raises(volumes.VolumeError, match=message):
        volumes.layout(pod(*volume_list), {"volumeMounts": mount_list}, lookup, initial=True)


ACCESS = {"name": "kube-api-access", "projected": {"sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace",
                                "fieldRef": {"apiVersion": "v1",
                                             "fieldPath": "metadata.namespace"}}]}}]}}
ACCESS_MOUNT = {"name": "kube-api-access", "readOnly": True,
                "mountPath": volumes.SERVICE_ACCOUNT_DIR}


def test_the_service_account_volume() -> None:
    DATA[("ConfigMap", "ns", "kube-root-ca.crt")] = {"ca.crt": b"CA"}
    found = volumes.layout(pod(ACCESS), {"volumeMounts": [ACCESS_MOUNT]}, lookup,
                           initial=False, token="t0k")
    assert found == {f"{volumes.SERVICE_ACCOUNT_DIR}/token": b"t0k",
                     f"{volumes.SERVICE_ACCOUNT_DIR}/ca.crt": b"CA",
                     f"{volumes.SERVICE_ACCOUNT_DIR}/namespace": b"ns"}


@pytest.mark.parametrize(("mount_list", "rooted"), [
    pytest.param([], False, id="no-mounts"),
    pytest.param([ACCESS_MOUNT], False, id="only-the-service-account"),
    pytest.param([ACCESS_MOUNT, {"name": "cert", "mountPath": "/certs"}], True, id="volumes"),
])
def test_needs_root(mount_list: list[Obj], rooted: bool) -> None:
    assert volumes.needs_root({"volumeMounts": mount_list}) is rooted
