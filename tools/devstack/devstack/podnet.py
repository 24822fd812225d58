"""The network half of a local pod, run inside a network namespace of its own.

Knative's components are built for a pod each: several serve health probes on the fixed port
8080 and exit when it is taken, so they cannot share one host's ports. The local kubelet
(:mod:`devstack.kubelet`) therefore starts each pod as
``unshare --user --map-root-user --net python -m devstack.podnet CONFIG``; inside, only a
loopback interface exists, and this process gives the container what a pod network gives it:

* ``lo`` up, so the container can listen on its ports as in a pod;
* ``127.0.0.1:<API server port>`` and ``127.0.0.1:<proxy port>``: each connection the
  container opens there is handed, as a file descriptor, to the cluster network
  (:mod:`devstack.network`), which serves it as its own (:mod:`devstack.handoff`):
  a socket file is the one way out of the namespace, and nothing here copies the bytes;
* each container port reachable from outside through the pod's directory, as a pod IP would
  make it: ``<port>`` relays a connection to it (the kubelet's probes), ``<port>.fd`` answers
  with a socket connected to it (the cluster network's connections);
* the container's command run with exactly the environment in the config (nothing of this
  process's), ``chroot``-ed into the pod's root directory when the config names one
  (:mod:`devstack.podroot`; ``argv[0]`` is then a path inside it), SIGTERM passed on, and
  its exit code returned.

CONFIG is a JSON file: ``argv``, ``env``, ``outbound`` (``[{"port": N, "handoff": PATH,
"name": NAME}]``, or ``"unix": PATH`` for a relay to that socket), ``inbound``
(``[{"unix": PATH, "port": N, "handoff": PATH}]``) and optionally ``root``.
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
from typing import Any, TypeVar, cast

from devstack.handoff import accept_forever, hand_over, serve_connects

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
    """Both directions of one connection, until both sides have closed.

    Once a connection is joined (a handshake read through the streams), its bytes need no
    reader: each side's transport is handed a :class:`_Relay`, which writes what arrives to the
    other side in the event loop's own callback. Every message of the local Knative data plane
    crosses this (several times per event), and a stream reader and a task per direction cost
    about twice the CPU per message. When either side ends, the other gets the end and both
    close, as before the relays."""
    done = asyncio.get_running_loop().create_future()
    first = cast(asyncio.Transport, writer.transport)
    second = cast(asyncio.Transport, upstream_writer.transport)
    relays = (_Relay(second, done), _Relay(first, done))
    relays[0].other, relays[1].other = relays[1], relays[0]
    for transport, stream, relay in ((first, reader, relays[0]), (second, upstream, relays[1])):
        transport.set_protocol(relay)
        # What the stream had read but not handed out yet goes on first.
        buffered = bytes(getattr(stream, "_buffer", b""))
        if buffered:
            relay.data_received(buffered)
        if stream.at_eof():
            relay.eof_received()
        elif not transport.is_closing() and not transport.is_reading():
            transport.resume_reading()  # a full stream buffer may have paused it
    await done


class _Relay(asyncio.Protocol):
    """The protocol of one side of a spliced connection: what arrives is written to ``peer``
    (the other side's transport); when ``peer`` cannot take more, this side stops reading."""

    def __init__(self, peer: asyncio.Transport, done: asyncio.Future[None]) -> None:
        self.peer = peer
        self.done = done
        self.other: _Relay | None = None
        self.lost = False

    def data_received(self, data: bytes) -> None:
        if not self.peer.is_closing():
            self.peer.write(data)

    def eof_received(self) -> bool:
        with contextlib.suppress(OSError, RuntimeError):
            if self.peer.can_write_eof():
                self.peer.write_eof()
        self.peer.close()
        return False  # this side closes too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.peer.close()
        if self.other is not None and self.other.lost and not self.done.done():
            self.done.set_result(None)

    # Flow control: this side's transport buffers writes (the peer's data) beyond its limit.
    def pause_writing(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        with contextlib.suppress(RuntimeError):
            if not self.peer.is_closing():
                self.peer.resume_reading()


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


def tcp_listener(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(256)
    return listener


def handed_over(handoff: str, name: str) -> Any:
    async def each(connection: socket.socket) -> None:
        await hand_over(connection, handoff, name)
    return each


async def run(config: dict[str, Any]) -> int:
    servers: list[asyncio.Server] = []
    loops: list[asyncio.Task[None]] = []
    for route in config.get("outbound") or []:
        if route.get("handoff"):
            loops.append(asyncio.ensure_future(accept_forever(
                tcp_listener(int(route["port"])), handed_over(route["handoff"], route["name"]))))
        else:
            servers.append(await asyncio.start_server(to_unix(route["unix"]), "127.0.0.1",
                                                      int(route["port"])))
    for route in config.get("inbound") or []:
        path = Path(route["unix"])
        path.unlink(missing_ok=True)
        servers.append(await asyncio.start_unix_server(to_port(int(route["port"])), str(path)))
        if route.get("handoff"):
            loops.append(asyncio.ensure_future(
                serve_connects(route["handoff"], int(route["port"]))()))
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
    for accepting in loops:
        accepting.cancel()
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
    cluster network carries every byte between the local pods, and uvloop spends less CPU per
    message."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m devstack.podnet CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(argv[0]).read_text())
    loopback_up()
    return run_loop(run(config))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
