"""Listening ports for the local processes (API server, etcd, functions, the cluster network).

A port is picked now and bound later, sometimes seconds later, by another process (after a
cluster has started). The kernel gives every outgoing connection a local port from its
ephemeral range (``ip_local_port_range``), and so does ``bind(("127.0.0.1", 0))``: a port
picked that way can meanwhile become the local end of some client connection, and the later
bind fails with EADDRINUSE. Ports are therefore picked below that range, at random (from the
system's entropy, so that parallel test workers with seeded ``random`` do not walk the same
sequence), and checked bindable when picked.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_RANGE = (32768, 60999)
LOWEST = 10000  # below: the ports of well-known local services
TRIES = 64

_random = random.SystemRandom()


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return LINUX_DEFAULT_RANGE
    return low, high


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(ephemeral: tuple[int, int] | None = None) -> int:
    """A loopback port no one listens on, outside the ephemeral range when there is room
    below it; the kernel's pick otherwise."""
    low, _ = ephemeral or ephemeral_range()
    candidates = range(LOWEST, low)
    for port in _random.sample(candidates, min(TRIES, len(candidates))):
        if bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
