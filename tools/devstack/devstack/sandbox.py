"""What a local pod's process runs in: a network namespace of its own (``unshare``), and the
kubelet's probes, which reach the pod's ports through the sockets its network process keeps
(:mod:`devstack.podnet`)."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from pathlib import Path

from devstack.core import podspec

SANDBOX = ("unshare", "--user", "--map-root-user", "--net", "--")


def sandbox_available() -> str | None:
    """``None`` when pods can get network namespaces here, else why not."""
    try:
        done = subprocess.run([*SANDBOX, "true"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run unshare: {exc}"
    if done.returncode != 0:
        return (f"`unshare --user --map-root-user --net` failed ({done.stderr.strip()}): "
                "the local Knative stack needs network namespaces (run as root, or allow "
                "unprivileged user namespaces)")
    return None


class _PodSocketConnection(http.client.HTTPConnection):
    """``http.client`` over the Unix socket that reaches a pod's port (plain or TLS): the
    standard client frames the probe and reads its answer."""

    def __init__(self, path: Path, host: str, timeout: float, tls: bool) -> None:
        super().__init__(host, timeout=timeout)
        self._path = path
        self._tls = tls

    def connect(self) -> None:
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            raw.settimeout(self.timeout)
            raw.connect(str(self._path))
            if self._tls:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE  # a kubelet does not verify probes either
                raw = context.wrap_socket(raw)
        except BaseException:
            raw.close()
            raise
        self.sock = raw


def probe_once(path: Path, probe: podspec.Probe, pod_ip: str) -> bool:
    """One HTTP(S) GET through the pod's socket for ``probe.port``; 200-399 passes."""
    connection = _PodSocketConnection(path, f"{pod_ip}:{probe.port}", probe.timeout,
                                      probe.scheme.upper() == "HTTPS")
    try:
        connection.request("GET", probe.path, headers={
            "User-Agent": "kube-probe/1.35", "Connection": "close", **dict(probe.headers)})
        return 200 <= connection.getresponse().status < 400
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False
    finally:
        connection.close()
