"""The root a local pod's container runs in: laid out from its volumes, whole-volume mounts
following their objects, ``subPath`` files written once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from devstack.core import podspec
from devstack.core.volumes import SERVICE_ACCOUNT_DIR, VolumeError
from devstack.podroot import PodRoot

Obj = dict[str, Any]


def controller_pod(image: str) -> Obj:
    """A pod shaped as the upstream Trainer's (after the API server's admission)."""
    return {
        "metadata": {"name": "manager-1", "namespace": "opendatahub"},
        "spec": {
            "containers": [{"name": "manager", "image": image, "volumeMounts": [
                {"name": "config", "mountPath": "/controller_manager_config.yaml",
                 "subPath": "controller_manager_config.yaml", "readOnly": True},
                {"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                 "readOnly": True},
                {"name": "kube-api-access", "mountPath": SERVICE_ACCOUNT_DIR}]}],
            "volumes": [
                {"name": "config", "configMap": {"name": "config"}},
                {"name": "cert", "secret": {"secretName": "cert"}},
                {"name": "kube-api-access", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt",
                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]}}


class Objects:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], dict[str, bytes]] = {
            ("ConfigMap", "config"): {"controller_manager_config.yaml": b"v1"},
            ("ConfigMap", "kube-root-ca.crt"): {"ca.crt": b"CA"},
            ("Secret", "cert"): {},
        }

    def __call__(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
        assert namespace == "opendatahub"
        return self.data.get((kind, name))


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "trainer-controller-manager"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(("image", "entrypoint"), [
    pytest.param(podspec.TRAINER_IMAGE, "/manager", id="image-entrypoint"),
    pytest.param("example.com/other:1", "/trainer-controller-manager", id="binary-name"),
])
def test_the_root_holds_the_entrypoint_and_every_mount(tmp_path: Path, binary: Path,
                                                       image: str, entrypoint: str) -> None:
    objects = Objects()
    root = PodRoot.prepared(tmp_path / "root", controller_pod(image), binary, objects, "tok")
    assert root.entrypoint == entrypoint
    top = tmp_path / "root"
    assert os.access(top / entrypoint.lstrip("/"), os.X_OK)
    assert (top / "controller_manager_config.yaml").read_bytes() == b"v1"
    assert (top / "tmp/k8s-webhook-server/serving-certs").is_dir()
    assert (top / SERVICE_ACCOUNT_DIR.lstrip("/") / "token").read_bytes() == b"tok"
    assert (top / SERVICE_ACCOUNT_DIR.lstrip("/") / "ca.crt").read_bytes() == b"CA"

    # the controller fills its certificate Secret in and edits its ConfigMap meanwhile
    objects.data[("Secret", "cert")] = {"tls.crt": b"CRT", "tls.key": b"KEY"}
    objects.data[("ConfigMap", "config")] = {"controller_manager_config.yaml": b"v2"}
    root.refresh()
    assert (top / "tmp/k8s-webhook-server/serving-certs/tls.crt").read_bytes() == b"CRT"
    assert (top / "controller_manager_config.yaml").read_bytes() == b"v1", "a subPath stays"


def test_a_missing_secret_keeps_the_container_from_starting(tmp_path: Path,
                                                           binary: Path) -> None:
    objects = Objects()
    del objects.data[("Secret", "cert")]
    with pytest.raises(VolumeError, match="Secret opendatahub/cert"):
        PodRoot.prepared(tmp_path / "root", controller_pod(podspec.TRAINER_IMAGE), binary,
                         objects, "tok")
