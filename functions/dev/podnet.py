"""The network half of a local pod, run inside a network namespace of its own.

Knative's components are built for a pod each: several serve health probes on the fixed port
8080 and exit when it is taken, so they cannot share one host's ports. The local kubelet
(:mod:`functions.dev.kubelet`) therefore starts each pod as
``unshare --user --map-root-user --net python -m functions.dev.podnet CONFIG``; inside, only a
loopback interface exists, and this process gives the container what a pod network gives it:

* ``lo`` up, so the container can listen on its ports as in a pod;
* ``127.0.0.1:<API server port>`` forwarded to the API server, and ``127.0.0.1:<proxy port>``
  to the cluster network's proxy (:mod:`functions.dev.network`), both through Unix sockets the
  host side serves: a socket file is the one way out of the namespace;
* each container port served on a Unix socket in the pod's directory, through which the
  cluster network and the kubelet's probes reach the pod, as they would reach a pod IP;
* the container's command run with exactly the environment in the config (nothing of this
  process's), ``chroot``-ed into the pod's root directory when the config names one
  (:mod:`functions.dev.podroot`; ``argv[0]`` is then a path inside it), SIGTERM passed on, and
  its exit code returned.

CONFIG is a JSON file: ``argv``, ``env``, ``outbound`` (``[{"port": N, "unix": PATH}]``),
``inbound`` (``[{"unix": PATH, "port": N}]``) and optionally ``root``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
CHUNK = 65536
T = TypeVar("T")


def loopback_up() -> None:
    """Bring ``lo`` up: a new network namespace starts with it down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then half-close the other side."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 upstream: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter) -> None:
    """Both directions of one connection, until both have ended."""
    await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream, writer))


def to_unix(path: str) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream, upstream_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        await splice(reader, writer, upstream, upstream_writer)
    return handle


def to_port(port: int) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await splice(reader, writer, upstream, upstream_writer)
    return handle


async def run(config: dict[str, Any]) -> int:
    servers = []
    for route in config.get("outbound") or []:
        servers.append(await asyncio.start_server(to_unix(route["unix"]), "127.0.0.1",
                                                  int(route["port"])))
    for route in config.get("inbound") or []:
        path = Path(route["unix"])
        path.unlink(missing_ok=True)
        servers.append(await asyncio.start_unix_server(to_port(int(route["port"])), str(path)))
    root = config.get("root")
    process = await asyncio.create_subprocess_exec(
        *config["argv"], env=config["env"],
        preexec_fn=None if root is None else _enter(str(root)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _forward, process, sig)
    code = await process.wait()
    for server in servers:
        server.close()
    return code


def _enter(root: str) -> Any:
    def enter() -> None:
        os.chroot(root)
        os.chdir("/")
    return enter


def _forward(process: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, on uvloop's event loop when it is installed (the ``dev`` extra): the
    relays carry every byte between the local pods, and uvloop spends less CPU per message."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m functions.dev.podnet CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(argv[0]).read_text())
    loopback_up()
    return run_loop(run(config))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
