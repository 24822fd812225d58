"""urllib3 connection pools whose requests end by a deadline and whose answers have a size
limit: the HTTP client of the API transport (:mod:`functions.kube.transport`) and of the event
sender (:mod:`functions.runtime.sender`).

urllib3 (over ``http.client``) does the HTTP: framing, keep-alive, TLS, the check that a pooled
connection is still open and has nothing unread on it before it is used again. Two things it
leaves open are closed here:

* **A deadline per request.** urllib3's timeouts bound each socket operation, not a request:
  ``http.client`` skips ``100 Continue`` heads and reads trailers in loops that a server
  sending one more of them before every timeout keeps going forever, and a TLS handshake
  sent a byte at a time is as slow as the server likes. A :class:`Watchdog` thread holds the
  deadlines of the requests in flight and shuts down the sockets of a request that overruns
  its own; the blocked read ends and the request fails. The connection classes register
  every socket a request uses (a new one before its TLS handshake, a pooled one when it
  carries the request) with the deadline of the request under way in their thread.
* **A size limit on answers.** :func:`read_body` refuses a body over its limit (at once when
  ``Content-Length`` says so) and reads in bounded pieces, so that a huge length never becomes
  one huge allocation.

Whatever a request raises is one of :data:`ERRORS`.
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import math
import os
import socket
import ssl
import threading
import time
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError
from urllib3.util import Retry, Timeout

# Read size of a body whose length is not announced (chunked, or until the connection ends).
PIECE = 1 << 16
CONNECT_TIMEOUT = 5.0


class AnswerTooLarge(Exception):
    """An answer's body over the reader's limit."""


class DeadlinePassed(Exception):
    """The request's deadline passed: its sockets were shut down, so whatever was read last
    may have ended there rather than where the server meant it to (``http.client`` takes an
    end of stream among trailers for their end)."""


# Everything a request through these pools can raise: urllib3's errors (which wrap most of
# http.client's and the socket's), the rest of http.client's and the socket's, the
# ``ValueError``/``OverflowError``/``MemoryError`` of lengths no buffer can hold (a negative
# chunk size reaches ``BufferedReader.read``), and the limits here.
ERRORS = (HTTPError, http.client.HTTPException, OSError, ValueError, OverflowError,
          MemoryError, AnswerTooLarge, DeadlinePassed)


class Deadline:
    """When one request must be over, and the sockets it uses until then."""

    __slots__ = ("at", "expired", "finished", "seconds", "sockets")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.sockets: list[socket.socket] = []
        self.expired = False
        self.finished = False


class Watchdog:
    """One daemon thread that shuts down the sockets of requests past their deadline.

    A request's deadline begins with :meth:`start` (and becomes its thread's current one, for
    the connection classes to register sockets with) and ends with :meth:`finish` once its
    answer is whole, before its connection goes back to a pool: a connection another request
    has taken is never shut down for the first one's deadline. The thread sleeps until the earliest
    deadline. Finished deadlines leave the heap when they reach its top (requests mostly end
    in the order they began), or all at once when they outnumber the others, so neither the
    heap nor the thread's wake-ups grow with the requests sent. The thread ends once no
    request has been under way for ``idle`` seconds, and starts again with the next one.
    """

    def __init__(self, idle: float = 10.0) -> None:
        self.idle = idle
        self._reset()

    def _reset(self) -> None:
        # A forked child has none of its parent's threads: it starts its own when it needs it.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Deadline]] = []
        self._active = 0
        # When the thread wakes next (it is told of an earlier deadline only: a request that
        # would wake it each time costs a thread switch per request).
        self._waking = math.inf
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._local = threading.local()

    def start(self, seconds: float, sock: socket.socket | None = None) -> Deadline:
        """A deadline ``seconds`` from now for this thread's request (and ``sock``)."""
        deadline = Deadline(seconds)
        if sock is not None:
            deadline.sockets.append(sock)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadlines",
                                                daemon=True)
                self._thread.start()
            if deadline.at < self._waking:
                self._wake.notify()
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            self._active += 1
        self._local.deadline = deadline
        return deadline

    def finish(self, deadline: Deadline) -> None:
        """The request is over: its sockets are its own again."""
        with self._lock:
            if not deadline.finished:
                deadline.finished = True
                deadline.sockets.clear()
                if not deadline.expired:
                    self._active -= 1
            heap = self._heap
            while heap and heap[0][2].finished:
                heapq.heappop(heap)
            if len(heap) > 64 and len(heap) > 4 * self._active:
                heap[:] = [entry for entry in heap if not entry[2].finished]
                heapq.heapify(heap)
        self._local.deadline = None

    def attach(self, sock: socket.socket) -> None:
        """Register ``sock`` with this thread's request under way, if any (shut down at once
        when that request's deadline has already passed)."""
        deadline: Deadline | None = getattr(self._local, "deadline", None)
        if deadline is None:
            return
        with self._lock:
            if deadline.finished:
                return
            if deadline.expired or time.monotonic() >= deadline.at:  # the thread may lag
                _shut(sock)
                return
            deadline.sockets.append(sock)

    def _run(self) -> None:
        with self._lock:
            while True:
                if not self._heap:
                    self._waking = math.inf
                    if not self._wake.wait(self.idle) and not self._heap:
                        self._thread = None
                        return
                    continue
                at, _, deadline = self._heap[0]
                now = time.monotonic()
                if at > now:
                    self._waking = at
                    self._wake.wait(at - now)
                    continue
                heapq.heappop(self._heap)
                if deadline.finished:
                    continue
                # Under the lock: a request cannot finish (and give its connection to another
                # request) between the decision and the shutdown.
                deadline.expired = True
                self._active -= 1
                for sock in deadline.sockets:
                    _shut(sock)
                deadline.sockets.clear()


def _shut(sock: socket.socket) -> None:
    """End both directions of ``sock``: a read blocked on it in another thread returns. The
    plain socket's method, also for a TLS socket, whose own ``shutdown`` would drop its TLS
    state under the thread reading it."""
    with contextlib.suppress(OSError):  # closed already, or never connected
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG._reset)


class GuardedHTTPConnection(HTTPConnection):
    """An urllib3 connection whose sockets are under the deadline of the request using it."""

    def _new_conn(self) -> socket.socket:
        # Registered as soon as it is connected: an HTTPS connection's TLS handshake is part
        # of the request's time.
        sock = super()._new_conn()
        WATCHDOG.attach(sock)
        return sock

    def request(self, method: str, url: str, body: Any = None,
                headers: Any = None, **options: Any) -> None:
        if self.sock is not None:  # a pooled connection, now carrying this request
            WATCHDOG.attach(self.sock)
        super().request(method, url, body, headers, **options)


class GuardedHTTPSConnection(HTTPSConnection):
    """The TLS connection of :class:`GuardedHTTPConnection`."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        WATCHDOG.attach(sock)
        return sock

    def request(self, method: str, url: str, body: Any = None,
                headers: Any = None, **options: Any) -> None:
        if self.sock is not None:
            WATCHDOG.attach(self.sock)
        super().request(method, url, body, headers, **options)


def new_pool(scheme: str, host: str, port: int, *, maxsize: int, retries: Retry,
             ssl_context: ssl.SSLContext | None = None,
             insecure: bool = False) -> urllib3.HTTPConnectionPool:
    """A pool of at most ``maxsize`` idle connections to one origin; more requests at once
    than that open more connections (``block=False``), closed when they are given back."""
    if scheme == "https":
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            host, port, maxsize=maxsize, block=False, retries=retries,
            ssl_context=ssl_context, cert_reqs="CERT_NONE" if insecure else "CERT_REQUIRED",
            assert_hostname=False if insecure else None)
        pool.ConnectionCls = GuardedHTTPSConnection
    elif scheme == "http":
        pool = urllib3.HTTPConnectionPool(host, port, maxsize=maxsize, block=False,
                                          retries=retries)
        pool.ConnectionCls = GuardedHTTPConnection
    else:
        raise ValueError(f"unsupported scheme {scheme!r}")
    return pool


_TIMEOUTS: dict[float, Timeout] = {}


def socket_timeout(seconds: float) -> Timeout:
    """Connect within ``seconds`` (at most 5 s), then wait ``seconds`` at most per read (the
    deadline bounds the whole). Shared per value: urllib3 copies it for each request."""
    found = _TIMEOUTS.get(seconds)
    if found is None:
        found = _TIMEOUTS[seconds] = Timeout(connect=min(seconds, CONNECT_TIMEOUT),
                                             read=seconds)
    return found


def final(response: urllib3.BaseHTTPResponse) -> urllib3.BaseHTTPResponse:
    """``response``, if it is a final answer whose length is stated as RFC 9112 (6.1, 6.3)
    requires; else it is closed and an error raised.

    ``http.client`` skips ``100 Continue`` alone and hands any other 1xx over as the answer,
    while the real answer follows on the connection (nothing here asks for one: no
    ``Expect``, no ``Upgrade``). It reads a body up to the connection's end for a
    ``Content-Length`` that is not a number (``-1``) and takes what Python's ``int`` takes
    (``+3``); urllib3 refuses only differing values. An answer with both a length and
    ``Transfer-Encoding`` is the mark of a response splitting attempt."""
    problem = None
    if response.status < 200:
        problem = f"an interim answer ({response.status}) as the answer"
    length = response.headers.get("Content-Length")
    if length is not None:
        if "Transfer-Encoding" in response.headers:
            problem = "an answer with both Content-Length and Transfer-Encoding"
        elif not all(v.strip().isascii() and v.strip().isdigit() for v in length.split(",")):
            problem = f"an answer whose Content-Length is {length!r}"
    if problem is not None:
        response.close()
        raise http.client.HTTPException(problem)
    return response


def read_body(response: urllib3.BaseHTTPResponse, limit: int) -> bytes:
    """The whole body of ``response``, refused past ``limit`` bytes (:class:`AnswerTooLarge`).
    On any error the connection is closed (the caller gives it back to its pool)."""
    try:
        length = response.length_remaining
        if length is not None:
            if length > limit:
                raise AnswerTooLarge(f"an answer of {length} bytes, over the limit of {limit}")
            return response.read()
        pieces = []
        total = 0
        while piece := response.read(PIECE):
            total += len(piece)
            if total > limit:
                raise AnswerTooLarge(f"an answer over the limit of {limit} bytes")
            pieces.append(piece)
        return b"".join(pieces)
    except BaseException:
        response.close()
        raise


def check(deadline: Deadline) -> None:
    """Raise :class:`DeadlinePassed` if ``deadline`` expired (call after it finished)."""
    if deadline.expired:
        raise DeadlinePassed("the answer was cut short")


def describe(exc: BaseException, deadline: Deadline) -> str:
    """What went wrong, saying so when it was the deadline that ended the request."""
    if deadline.expired:
        return f"no whole answer within {deadline.seconds:g} s ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"
