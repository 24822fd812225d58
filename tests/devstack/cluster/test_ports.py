"""Listening ports are picked where no outgoing connection can take them before they are
bound."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devstack.cluster import ports


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("32768\t60999\n", (32768, 60999), id="linux-default"),
    pytest.param("15000 20000\n", (15000, 20000), id="narrowed"),
    pytest.param("garbage\n", ports.LINUX_DEFAULT_RANGE, id="unreadable-falls-back"),
])
def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path: Path, text: str,
                                                     expected: tuple[int, int]) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    assert ports.ephemeral_range(path) == expected


def test_a_missing_range_file_means_the_linux_default(tmp_path: Path) -> None:
    assert ports.ephemeral_range(tmp_path / "absent") == ports.LINUX_DEFAULT_RANGE


def test_picked_ports_lie_below_the_ephemeral_range_and_can_be_bound() -> None:
    low, _ = ports.ephemeral_range()
    picked = {ports.free_port() for _ in range(20)}
    assert all(ports.LOWEST <= port < low for port in picked)
    assert len(picked) > 1  # at random, not one fixed port
    for port in picked:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", ports.free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        # The only candidate below a range starting just above the taken port is that port.
        monkeypatch.setattr(ports, "LOWEST", port)
        picked = ports.free_port((port + 1, 60999))
    low, high = ports.ephemeral_range()
    assert picked != port
    assert low <= picked <= high  # the kernel's pick instead


def test_without_room_below_the_range_the_kernel_picks() -> None:
    port = ports.free_port((ports.LOWEST, 60999))
    assert port >= ports.LOWEST
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
