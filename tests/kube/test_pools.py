"""The deadline watchdog of the HTTP pools (``functions.kube.pools``) on socket pairs: a
request past its deadline has its sockets shut down (a blocked read returns), a finished one
never, a socket joining a request already past its deadline is shut at once, finished
deadlines do not pile up, and a forked child has a watchdog of its own. The clients' behaviour
against servers is in ``test_transport.py`` and ``tests/runtime/test_sender.py``."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from functions.kube.pools import WATCHDOG, Watchdog
from tests.kube.hostile import SLACK


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours, theirs


def test_a_read_blocked_past_the_deadline_returns(pair: tuple[socket.socket, socket.socket]
                                                  ) -> None:
    ours, _ = pair
    watchdog = Watchdog(idle=0.1)
    started = time.monotonic()
    deadline = watchdog.start(0.2, ours)
    assert ours.recv(1) == b""  # shut down: the end of the stream
    watchdog.finish(deadline)
    assert deadline.expired
    assert 0.2 <= time.monotonic() - started < 0.2 + SLACK


def test_a_finished_request_keeps_its_sockets(pair: tuple[socket.socket, socket.socket]
                                              ) -> None:
    ours, theirs = pair
    watchdog = Watchdog(idle=0.1)
    watchdog.finish(watchdog.start(0.05, ours))
    time.sleep(0.2)
    theirs.sendall(b"x")
    assert ours.recv(1) == b"x"


def test_a_socket_joining_a_request_past_its_deadline_is_shut_at_once(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = pair
    watchdog = Watchdog(idle=0.1)
    deadline = watchdog.start(0.05)
    time.sleep(0.2)
    watchdog.attach(ours)  # as a connection opened for the request now does
    ours.settimeout(5)
    assert ours.recv(1) == b""
    watchdog.finish(deadline)


def test_a_socket_is_registered_with_its_own_thread_request_only(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    watchdog = Watchdog(idle=0.1)
    deadline = watchdog.start(0.05)
    other = threading.Thread(target=watchdog.attach, args=(ours,))
    other.start()
    other.join()
    time.sleep(0.2)
    watchdog.finish(deadline)
    theirs.sendall(b"x")
    assert ours.recv(1) == b"x"


def test_finished_deadlines_do_not_pile_up() -> None:
    watchdog = Watchdog(idle=0.1)
    for _ in range(1000):
        watchdog.finish(watchdog.start(30))
    assert len(watchdog._heap) == 0
    long = watchdog.start(60)  # a watch's, at the top of the heap for a minute

    def requests() -> None:
        for _ in range(1000):
            watchdog.finish(watchdog.start(30))

    sender = threading.Thread(target=requests)
    sender.start()
    sender.join()
    assert len(watchdog._heap) <= 100
    watchdog.finish(long)


def test_a_forked_child_has_a_watchdog_of_its_own() -> None:
    """The child of a process whose watchdog thread runs (a forked worker) has no such
    thread: its first deadline starts its own. Bounded both ways: the child is ended by an
    alarm, and waited for 15 s at most."""
    WATCHDOG.finish(WATCHDOG.start(30))  # the parent's thread runs
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's result is its exit status
        try:
            signal.alarm(10)
            WATCHDOG.start(0.1, ours)
            os._exit(0 if ours.recv(1) == b"" else 1)
        finally:
            os._exit(2)
    try:
        deadline = time.monotonic() + 15
        while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child's deadline never ended its read")
    finally:
        ours.close()
        theirs.close()
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_the_thread_ends_when_idle_and_starts_again() -> None:
    watchdog = Watchdog(idle=0.1)
    watchdog.finish(watchdog.start(0.05))
    deadline = time.monotonic() + 10
    while watchdog._thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watchdog._thread is None
    ours, theirs = socket.socketpair()
    with ours, theirs:
        watchdog.start(0.1, ours)
        assert ours.recv(1) == b""
