"""What a local pod's process runs in: a network namespace of its own (``unshare``), and the
kubelet's probes, which reach the pod's ports through the sockets its network process keeps
(:mod:`functions.dev.podnet`)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
from pathlib import Path

from functions.dev.core import podspec

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


def probe_once(path: Path, probe: podspec.Probe, pod_ip: str) -> bool:
    """One HTTP(S) GET through the pod's socket for ``probe.port``; 200-399 passes."""
    try:
        with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as raw:
            raw.settimeout(probe.timeout)
            raw.connect(str(path))
            sock: socket.socket = raw
            if probe.scheme.upper() == "HTTPS":
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE  # a kubelet does not verify probes either
                sock = context.wrap_socket(raw)
            headers = "".join(f"{k}: {v}\r\n" for k, v in probe.headers)
            sock.sendall((f"GET {probe.path} HTTP/1.1\r\nHost: {pod_ip}:{probe.port}\r\n"
                          f"User-Agent: kube-probe/1.35\r\nConnection: close\r\n{headers}\r\n")
                         .encode("latin-1"))
            first = sock.recv(64).split(b"\r\n", 1)[0].split()
            return len(first) >= 2 and first[1].isdigit() and 200 <= int(first[1]) < 400
    except (OSError, ssl.SSLError):
        return False
