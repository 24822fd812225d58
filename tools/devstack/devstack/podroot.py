"""The root directory a local pod's container runs in when it mounts volumes.

A container that mounts volumes expects files at absolute paths (the Trainer and JobSet
controllers read ``/controller_manager_config.yaml`` and serve the certificates in
``/tmp/k8s-webhook-server/serving-certs``). Such a container runs ``chroot``-ed
(:mod:`devstack.podnet`, inside its user namespace) in a directory of its own under the
pod's directory: the image's entrypoint (a link to the built binary), its volumes' files
(:mod:`devstack.core.volumes`; the ServiceAccount volume the API server adds among them)
and a ``/tmp``. Nothing
of the host is visible in it.

:meth:`PodRoot.refresh` writes the whole-volume mounts again, as a kubelet does, so a Secret
filled in after the container started (a certificate its controller generates) reaches it.
"""

from __future__ import annotations

import base64
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.core import podspec, volumes
from devstack.core.volumes import BinaryLookup
from functions.kube import resources
from functions.kube.client import KubeClient

Obj = dict[str, Any]


@dataclass
class PodRoot:
    """The root of one container; :meth:`prepare` before it starts."""

    directory: Path
    pod: Obj
    container: Obj
    lookup: BinaryLookup
    token: str
    entrypoint: str
    written: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def prepared(cls, directory: Path, pod: Obj, binary: Path, lookup: BinaryLookup,
                 token: str) -> PodRoot:
        """The root of ``pod``'s only container, laid out, its entrypoint ``binary``; raises
        ``VolumeError`` while a volume cannot be made (its Secret is missing, ...)."""
        container = pod["spec"]["containers"][0]
        entrypoint = podspec.IMAGE_ENTRYPOINTS.get(str(container.get("image", "")),
                                                   (f"/{binary.name}",))[0]
        root = cls(directory, pod, container, lookup, token, entrypoint)
        root.prepare(binary)
        return root

    def prepare(self, binary: Path) -> None:
        """Lay the root out: the entrypoint, every mount, ``/tmp``."""
        if self.directory.exists():
            shutil.rmtree(self.directory)
        (self.directory / "tmp").mkdir(parents=True)
        (self.directory / "tmp").chmod(0o1777)
        target = self._path(self.entrypoint)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(binary.resolve(), target)
        except OSError:
            shutil.copy2(binary.resolve(), target)
        for mount in volumes.mounts(self.container):
            if mount.sub_path is None:
                self._path(mount.path).mkdir(parents=True, exist_ok=True)
        self._write(volumes.layout(self.pod, self.container, self.lookup, initial=True,
                                   token=self.token))

    def refresh(self) -> None:
        """Write what changed in the whole-volume mounts (raises ``VolumeError`` as
        :func:`~devstack.core.volumes.layout` does)."""
        self._write(volumes.layout(self.pod, self.container, self.lookup, initial=False,
                                   token=self.token))

    def _write(self, files: dict[str, bytes]) -> None:
        for path, data in files.items():
            if self.written.get(path) == data:
                continue
            target = self._path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_bytes(data)
            temporary.chmod(0o644)
            temporary.replace(target)
            self.written[path] = data

    def _path(self, absolute: str) -> Path:
        return self.directory / absolute.lstrip("/")


def lookup_bytes(kube: KubeClient) -> BinaryLookup:
    """A ConfigMap's or Secret's data as the files of a volume."""
    def lookup(kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        res = resources.CONFIGMAPS if kind == "ConfigMap" else resources.SECRETS
        obj = kube.get(res, name, namespace)
        if obj is None:
            return None
        data = obj.get("data") or {}
        if kind == "Secret":
            return {k: base64.b64decode(v) for k, v in data.items()}
        return {k: str(v).encode() for k, v in data.items()} | {
            k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
    return lookup
