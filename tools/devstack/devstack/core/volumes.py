"""What a kubelet mounts into a container, as pure functions: the files of its ``configMap``,
``secret``, ``emptyDir`` and ``projected`` volumes (the API server's ServiceAccount admission
adds one to every pod: the token, the cluster's CA and the namespace), and where each lands.

The local kubelet (:mod:`devstack.kubelet`) runs a container that mounts volumes in a
root directory of its own (:mod:`devstack.podroot`); these functions decide that
directory's contents. As in a kubelet, a whole-volume mount follows later changes of its
ConfigMap or Secret (the kubelet writes them again), a ``subPath`` mount never does, and a
missing ConfigMap or Secret that is not ``optional`` keeps the container from starting.
Other volume types are refused with :class:`VolumeError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
# (kind "ConfigMap"|"Secret", namespace, name) -> its data as bytes (None when it is absent)
BinaryLookup = Callable[[str, str, str], "Mapping[str, bytes] | None"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class VolumeError(ValueError):
    """A volume the local kubelet cannot give (yet): a kubelet keeps the container waiting."""


@dataclass(frozen=True)
class Mount:
    """One ``volumeMounts`` entry: the volume's files (relative path -> content) placed at
    ``path``, or, with ``sub_path``, the one file of that name placed at ``path``."""

    path: str
    volume: str
    sub_path: str | None = None
    read_only: bool = False


def mounts(container: Obj) -> list[Mount]:
    """The container's mounts, in order; paths must be absolute and free of ``..``."""
    found = []
    for item in container.get("volumeMounts") or []:
        path = str(item.get("mountPath") or "")
        sub_path = item.get("subPath") or None
        for value in (path, sub_path or ""):
            if ".." in value.split("/"):
                raise VolumeError(f"volume mount {value!r} leaves its directory")
        if not path.startswith("/"):
            raise VolumeError(f"mountPath {path!r} is not absolute")
        found.append(Mount(path, str(item["name"]), sub_path, bool(item.get("readOnly"))))
    return found


def volume_files(pod: Obj, name: str, lookup: BinaryLookup, token: str = "") -> dict[str, bytes]:
    """The files of volume ``name`` of ``pod`` (relative path -> content); ``token`` is the
    pod's ServiceAccount token, for a projected ``serviceAccountToken``."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    volumes = {str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    volume = volumes.get(name)
    if volume is None:
        raise VolumeError(f"the pod has no volume {name!r}")
    if "emptyDir" in volume:
        return {}
    if "projected" in volume:
        files: dict[str, bytes] = {}
        for source in volume["projected"].get("sources") or []:
            files.update(_projection(pod, namespace, source, lookup, token))
        return files
    return _keyed_files(namespace, name, volume, lookup)


def _projection(pod: Obj, namespace: str, source: Obj, lookup: BinaryLookup,
                token: str) -> dict[str, bytes]:
    if "serviceAccountToken" in source:
        return {str(source["serviceAccountToken"].get("path") or "token"): token.encode()}
    if "downwardAPI" in source:
        files = {}
        for item in source["downwardAPI"].get("items") or []:
            path = str((item.get("fieldRef") or {}).get("fieldPath", ""))
            meta = pod.get("metadata") or {}
            values = {"metadata.namespace": meta.get("namespace"), "metadata.name":
                      meta.get("name"), "metadata.uid": meta.get("uid")}
            if path not in values:
                raise VolumeError(f"downwardAPI {path!r} is not supported")
            files[str(item["path"])] = str(values[path] or "").encode()
        return files
    for key in ("configMap", "secret"):
        if key in source:
            ref = dict(source[key])
            if key == "secret":
                ref["secretName"] = ref.pop("name", "")
            return _keyed_files(namespace, "projected", {key: ref}, lookup)
    raise VolumeError(f"projection {sorted(source)} is not supported")


def _keyed_files(namespace: str, name: str, volume: Obj,
                 lookup: BinaryLookup) -> dict[str, bytes]:
    for kind, key, ref_name in (("ConfigMap", "configMap", "name"),
                                ("Secret", "secret", "secretName")):
        source = volume.get(key)
        if source is None:
            continue
        data = lookup(kind, namespace, str(source.get(ref_name, "")))
        if data is None:
            if source.get("optional"):
                return {}
            raise VolumeError(f"{kind} {namespace}/{source.get(ref_name)} of volume "
                               f"{name!r} not found")
        items = source.get("items")
        if not items:
            return dict(data)
        files = {}
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise VolumeError(f"{kind} {namespace}/{source.get(ref_name)} has no key "
                                   f"{item['key']!r}")
            files[str(item["path"])] = data[item["key"]]
        return files
    raise VolumeError(f"volume {name!r}: {sorted(k for k in volume if k != 'name')} "
                       "is not supported")


def needs_root(container: Obj) -> bool:
    """Whether the container mounts more than the ServiceAccount volume (which the local
    kubelet otherwise gives as a kubeconfig)."""
    return any(m.path.rstrip("/") != SERVICE_ACCOUNT_DIR for m in mounts(container))


def layout(pod: Obj, container: Obj, lookup: BinaryLookup,
           *, initial: bool, token: str = "") -> dict[str, bytes]:
    """The container's files by absolute path. ``initial`` includes the ``subPath`` mounts,
    written once when the container starts; later calls give only what follows its volume."""
    files: dict[str, bytes] = {}
    for mount in mounts(container):
        if mount.sub_path is not None and not initial:
            continue
        content = volume_files(pod, mount.volume, lookup, token)
        if mount.sub_path is not None:
            if mount.sub_path not in content:
                raise VolumeError(f"volume {mount.volume!r} has no {mount.sub_path!r}")
            files[mount.path] = content[mount.sub_path]
            continue
        base = mount.path.rstrip("/")
        for relative, data in content.items():
            if ".." in relative.split("/") or relative.startswith("/"):
                raise VolumeError(f"volume {mount.volume!r} names a file {relative!r} "
                                   "outside it")
            files[f"{base}/{relative}"] = data
    return files
