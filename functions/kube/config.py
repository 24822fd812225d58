"""Where the API server is and how to authenticate to it.

Kubeconfig files are read by the ``kubernetes`` package's loader, as kubectl reads them: a
``KUBECONFIG`` list merged (the first file to name a cluster, user or context wins), any context,
exec credential plugins (EKS, GKE, AKS, ``oc`` logins) and auth providers, re-run when what they
returned expires, and ``tokenFile`` tokens, re-read whenever the token is refreshed (they rotate).
Importing it costs about 0.3 s (it loads the whole generated client), so only the command line,
``doctor`` and the local tools pay that: a function in a cluster reads its service account
(:func:`in_cluster`), a small loader of our own.

TLS takes certificates and keys only from files, so inline (``*-data``) ones of the chosen
context become files private to the process, one per distinct content however often a kubeconfig
is loaded, before the loader sees them. On Linux each is an anonymous memory file
(``memfd_create``) opened by its ``/proc/self/fd`` path: it is never on a disk and goes with the
process however that ends, a SIGTERM or a SIGKILL included (the local stack stops its processes
so). Elsewhere they are written to a directory private to the process (0700, files 0600) and
removed when the process that wrote them exits normally. A forked child makes its own and never
removes its parent's. What an exec plugin returns as client certificate data, the loader writes to
a private directory of the same kind.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    # The namespace the context names (the pod's own in a cluster): a command-line client's
    # default namespace, as kubectl's.
    namespace: str | None = None
    # Tokens an exec plugin or auth provider returns: asked again for each refresh (the
    # loader re-runs the plugin once what it returned has expired).
    token_source: Callable[[], str | None] | None = field(default=None, compare=False,
                                                          repr=False)

    def bearer_token(self) -> str | None:
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError:
                return self.token
        if self.token_source is not None:
            return self.token_source()
        return self.token


def in_cluster() -> ClusterConfig:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if not host or not token_file.exists():
        raise ConfigError("not running in a cluster (no KUBERNETES_SERVICE_HOST or token)")
    if ":" in host:
        host = f"[{host}]"
    try:
        namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
    except OSError:
        namespace = None
    return ClusterConfig(
        server=f"https://{host}:{port}",
        ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        token_file=str(token_file),
        source="in-cluster",
        namespace=namespace,
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
            pid = self._own()
            if name not in self._paths:
                self._paths[name] = (_memory_file(content, suffix) if self.anonymous
                                     else self._disk_file(name, content, pid))
            return self._paths[name]

    def private_directory(self) -> Path:
        """This process's private directory (0700, removed at exit), made on first use."""
        with self._lock:
            return self._made_directory(self._own())

    def _own(self) -> int:
        pid = os.getpid()
        if self._pid != pid:  # first use, or a forked child: start its own
            self._directory, self._paths, self._pid = None, {}, pid
        return pid

    def _made_directory(self, pid: int) -> Path:
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="kubecfg-"))  # mode 0700
            atexit.register(_remove_if_owner, self._directory, pid)
        return self._directory

    def _disk_file(self, name: str, content: bytes, pid: int) -> str:
        path = self._made_directory(pid) / name
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


def _private_file(data_b64: str, suffix: str) -> str:
    try:
        content = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"kubeconfig field with {suffix} data is not base64") from exc
    return PRIVATE_FILES.write(content, suffix)


# The inline fields of a chosen cluster and user, the field the loader reads a path from
# instead, and the suffix of the private file that holds the data.
INLINE_FIELDS = (("cluster", "certificate-authority-data", "certificate-authority", ".crt"),
                 ("user", "client-certificate-data", "client-certificate", ".crt"),
                 ("user", "client-key-data", "client-key", ".key"))


def _current_context(merger: Any) -> str | None:
    """The first ``current-context`` of the files in the list, as kubectl takes it (the
    loader's merge keeps the last one)."""
    for path in merger.paths:
        current = (merger.config_files.get(path) or {}).get("current-context")
        if current:
            return str(current)
    return None


def _entries(merged: Any, context: str | None, current: str | None) -> dict[str, Any]:
    """The chosen context's cluster and user entries of the merged kubeconfig (the loader's
    nodes, whose ``value`` is the entry itself), and the context's name."""
    name = context or current
    if not name:
        raise ConfigError("no context given and no current-context set")
    chosen = merged["contexts"].get_with_name(name)["context"]
    found: dict[str, Any] = {"context": name, "namespace": chosen.safe_get("namespace")}
    for kind in ("cluster", "user"):
        entry_name = chosen.safe_get(kind)
        listed = merged[kind + "s"] if merged.safe_get(kind + "s") else None
        found[kind] = (listed.get_with_name(entry_name, safe=True)
                       if entry_name and listed is not None else None)
    return found


def _keep_inline_data_private(entries: dict[str, Any]) -> None:
    """Replace the chosen entries' inline certificates and keys by private files' paths."""
    for kind, data_field, path_field, suffix in INLINE_FIELDS:
        node = entries[kind]
        body = node.value.get(kind) if node is not None else None
        if isinstance(body, dict) and body.get(data_field):
            body[path_field] = _private_file(str(body.pop(data_field)), suffix)


def _plugin_files(entries: dict[str, Any]) -> str | None:
    """Where the loader may write what a credential plugin returns (client certificate data):
    the private directory, made only for a user that has a plugin (the loader writes nothing
    else once inline data are private files)."""
    node = entries["user"]
    body = node.value.get("user") if node is not None else None
    if isinstance(body, dict) and (body.get("exec") or body.get("auth-provider")):
        return str(PRIVATE_FILES.private_directory())
    return None


def _token_file(entries: dict[str, Any]) -> str | None:
    """The chosen user's ``tokenFile``, relative to the kubeconfig that names it."""
    node = entries["user"]
    body = node.value.get("user") if node is not None else None
    if not isinstance(body, dict) or body.get("token") or not body.get("tokenFile"):
        return None
    base = Path(node.path).parent if isinstance(node.path, str) else Path.cwd()
    return str(base / str(body["tokenFile"]))


def kubeconfig_paths(path: str | os.PathLike[str] | None = None) -> str:
    """What :func:`from_kubeconfig` reads: ``path``, else ``$KUBECONFIG`` (a list), else
    ``~/.kube/config``."""
    if path:
        return os.fspath(path)
    return os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


def from_kubeconfig(path: str | os.PathLike[str] | None = None,
                    context: str | None = None) -> ClusterConfig:
    """The cluster and credentials of ``context`` (else the current context) of the kubeconfig
    at ``path`` (a ``KUBECONFIG``-style list is merged; default :func:`kubeconfig_paths`)."""
    # Imported here: 0.3 s that a function in a cluster, which never reads a kubeconfig,
    # should not pay at its cold start.
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    paths = kubeconfig_paths(path)
    try:
        merged = KubeConfigMerger(paths)
        if merged.config is None:
            raise ConfigError(f"no kubeconfig found at {paths}")
        entries = _entries(merged.config, context, _current_context(merged))
        if entries["cluster"] is None:
            raise ConfigError(f"kubeconfig {paths}: context {entries['context']!r} names no "
                              "cluster that is defined")
        _keep_inline_data_private(entries)
        configuration = Configuration()
        loader = KubeConfigLoader(config_dict=merged.config, active_context=entries["context"],
                                  config_base_path=None, temp_file_path=_plugin_files(entries))
        loader.load_and_set(configuration)
    except ConfigError:
        raise
    except (ConfigException, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"cannot use kubeconfig {paths}: {exc}") from exc
    return _cluster_config(configuration, entries, paths)


def _cluster_config(configuration: Any, entries: dict[str, Any], paths: str) -> ClusterConfig:
    authorization = str(configuration.api_key.get("authorization") or "")
    if authorization and not authorization.startswith("Bearer "):
        raise ConfigError(f"kubeconfig {paths}: user of context {entries['context']!r} has a "
                          "username and password; the API server needs a token or a client "
                          "certificate")
    user = entries["user"].value.get("user") if entries["user"] is not None else None
    if isinstance(user, dict) and user.get("exec") and not authorization and \
            not configuration.cert_file:
        command = (user.get("exec") or {}).get("command")
        raise ConfigError(f"kubeconfig {paths}: the exec credential plugin {command!r} of "
                          f"context {entries['context']!r} returned no credentials (its "
                          "error is logged above)")
    token_source = None
    if configuration.refresh_api_key_hook is not None:
        def token_source() -> str | None:
            configuration.refresh_api_key_hook(configuration)
            value = str(configuration.api_key.get("authorization") or "")
            return value.removeprefix("Bearer ") or None
    return ClusterConfig(
        server=str(configuration.host).rstrip("/"),
        ca_file=configuration.ssl_ca_cert,
        client_cert_file=configuration.cert_file,
        client_key_file=configuration.key_file,
        token=authorization.removeprefix("Bearer ") or None,
        token_file=_token_file(entries),
        insecure=not configuration.verify_ssl,
        source=paths,
        token_source=token_source,
        namespace=str(entries["namespace"]) if entries["namespace"] else None,
    )


def load() -> ClusterConfig:
    """``$KUBECONFIG`` if set, else the in-cluster service account, else ``~/.kube/config``."""
    if os.environ.get("KUBECONFIG"):
        return from_kubeconfig()
    try:
        return in_cluster()
    except ConfigError:
        default = Path.home() / ".kube" / "config"
        if default.exists():
            return from_kubeconfig(default)
        raise
