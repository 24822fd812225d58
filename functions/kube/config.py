"""Where the API server is and how to authenticate to it.

A small loader instead of ``kubernetes.config``: importing the official client costs about a
second, which a cold Knative pod should not pay. It supports what functions meet in practice: the
in-cluster service account (whose token rotates, so it is re-read on demand) and kubeconfig files
with client certificates, bearer tokens and CA data, inline or as file paths.

TLS takes certificates and keys only from files, so inline (``*-data``) ones become files
private to the process, one per distinct content however often a kubeconfig is loaded. On Linux
each is an anonymous memory file (``memfd_create``) opened by its ``/proc/self/fd`` path: it is
never on a disk and goes with the process however that ends, a SIGTERM or a SIGKILL included
(the local stack stops its processes so). Elsewhere they are written to a directory private to
the process (0700, files 0600) and removed when the process that wrote them exits normally. A
forked child makes its own and never removes its parent's.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(Exception):
    """No usable cluster configuration was found."""


@dataclass(frozen=True)
class ClusterConfig:
    """Connection settings; ``token_file`` is re-read whenever the token is refreshed."""

    server: str
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    insecure: bool = False
    source: str = field(default="", compare=False)

    def bearer_token(self) -> str | None:
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError:
                return self.token
        return self.token


def in_cluster() -> ClusterConfig:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if not host or not token_file.exists():
        raise ConfigError("not running in a cluster (no KUBERNETES_SERVICE_HOST or token)")
    if ":" in host:
        host = f"[{host}]"
    return ClusterConfig(
        server=f"https://{host}:{port}",
        ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        token_file=str(token_file),
        source="in-cluster",
    )


class _PrivateFiles:
    """Files only this process may read: anonymous memory files where the platform has them
    (``anonymous``, the default on Linux), else files of a private directory removed at exit."""

    def __init__(self, anonymous: bool | None = None) -> None:
        self.anonymous = (hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")
                          if anonymous is None else anonymous)
        self._lock = threading.Lock()
        self._directory: Path | None = None
        self._paths: dict[str, str] = {}
        self._pid = 0

    def directory(self) -> Path | None:
        """Where this process writes (``None`` before the first file, and for memory files)."""
        return self._directory if self._pid == os.getpid() else None

    def write(self, content: bytes, suffix: str) -> str:
        name = hashlib.sha256(content).hexdigest()[:32] + suffix
        with self._lock:
            pid = os.getpid()
            if self._pid != pid:  # first use, or a forked child: start its own
                self._directory, self._paths, self._pid = None, {}, pid
            if name not in self._paths:
                self._paths[name] = (_memory_file(content, suffix) if self.anonymous
                                     else self._disk_file(name, content, pid))
            return self._paths[name]

    def _disk_file(self, name: str, content: bytes, pid: int) -> str:
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="kubecfg-"))  # mode 0700
            atexit.register(_remove_if_owner, self._directory, pid)
        path = self._directory / name
        if not path.exists():
            partial = path.with_name(path.name + ".partial")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            partial.replace(path)
        return str(path)


def _memory_file(content: bytes, suffix: str) -> str:
    """An anonymous file holding ``content``, kept open for the life of the process; its
    ``/proc/self/fd`` path opens it afresh (offset 0) in this process, and only processes of
    the same user may open it from elsewhere, as with a file of a 0700 directory."""
    fd = os.memfd_create(f"kubecfg{suffix}", os.MFD_CLOEXEC)
    os.fchmod(fd, 0o600)
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view):]
    return f"/proc/self/fd/{fd}"


def _remove_if_owner(directory: Path, pid: int) -> None:
    if os.getpid() == pid:  # a forked child inherits this hook; only the writer removes
        shutil.rmtree(directory, ignore_errors=True)


PRIVATE_FILES = _PrivateFiles()


def _materialise(data_b64: str | None, path: str | None, base: Path, suffix: str) -> str | None:
    """A file path for a kubeconfig ``*-data`` (base64) or ``*`` (path) field."""
    if data_b64:
        try:
            content = base64.b64decode(data_b64)
        except (binascii.Error, ValueError) as exc:
            raise ConfigError(f"kubeconfig field with {suffix} data is not base64") from exc
        return PRIVATE_FILES.write(content, suffix)
    if path:
        resolved = Path(path)
        return str(resolved if resolved.is_absolute() else base / resolved)
    return None


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> ClusterConfig:
    file = Path(path)
    try:
        doc: dict[str, Any] = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read kubeconfig {file}: {exc}") from exc
    name = context or doc.get("current-context")
    contexts = {c["name"]: c.get("context", {}) for c in doc.get("contexts") or []}
    if name not in contexts:
        raise ConfigError(f"kubeconfig {file} has no context {name!r}")
    ctx = contexts[name]
    clusters = {c["name"]: c.get("cluster", {}) for c in doc.get("clusters") or []}
    users = {u["name"]: u.get("user", {}) for u in doc.get("users") or []}
    cluster = clusters.get(ctx.get("cluster"), {})
    user = users.get(ctx.get("user"), {})
    if "server" not in cluster:
        raise ConfigError(f"kubeconfig {file}: cluster of context {name!r} has no server")
    base = file.parent
    return ClusterConfig(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=_materialise(cluster.get("certificate-authority-data"),
                             cluster.get("certificate-authority"), base, ".crt"),
        client_cert_file=_materialise(user.get("client-certificate-data"),
                                      user.get("client-certificate"), base, ".crt"),
        client_key_file=_materialise(user.get("client-key-data"),
                                     user.get("client-key"), base, ".key"),
        token=user.get("token"),
        token_file=user.get("tokenFile"),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        source=str(file),
    )


def load() -> ClusterConfig:
    """``$KUBECONFIG`` if set, else the in-cluster service account, else ``~/.kube/config``."""
    env = os.environ.get("KUBECONFIG")
    if env:
        return from_kubeconfig(env.split(os.pathsep)[0])
    try:
        return in_cluster()
    except ConfigError:
        default = Path.home() / ".kube" / "config"
        if default.exists():
            return from_kubeconfig(default)
        raise
