"""Record the event stream that passes the router, and send it again, perturbed on purpose.

A recording is JSON Lines, one HTTP request per line, exactly as received (binary mode stays
binary): ``{"method", "path", "headers", "body"}`` plus ``"received"`` (a timestamp). ``body``
is the UTF-8 text of the body, or ``body_base64`` when it is not UTF-8. The reader also takes
the ``*.http.json`` sample layout, whose ``body`` is parsed JSON.

Replay exists to prove the controllers level-triggered: the same stream shuffled, with
duplicates and with events dropped must converge to the same cluster state (after a resync).
Mutations are drawn from ``random.Random(seed)``, so a failing run can be repeated exactly.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from devstack.post_server import PostServer
from functions.runtime.sender import HOP_HEADERS, post_event

log = logging.getLogger(__name__)

# Set by the transport, never part of an event.
# A sender's credential (the Broker's bearer token): never recorded, never sent again.
CREDENTIALS = frozenset({"authorization"})


@dataclass(frozen=True)
class RecordedRequest:
    headers: Mapping[str, str]
    body: bytes
    method: str = "POST"
    path: str = "/"
    received: str = ""

    def event_headers(self) -> dict[str, str]:
        """The headers to send again (transport headers and credentials left out)."""
        return {k: v for k, v in self.headers.items()
                if k.lower() not in HOP_HEADERS and k.lower() not in CREDENTIALS}

    def to_json(self) -> dict[str, Any]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in CREDENTIALS}
        line: dict[str, Any] = {"received": self.received, "method": self.method,
                                "path": self.path, "headers": headers}
        try:
            line["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            line["body_base64"] = base64.b64encode(self.body).decode("ascii")
        return line

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> RecordedRequest:
        body: bytes
        if "body_base64" in line:
            body = base64.b64decode(line["body_base64"])
        elif isinstance(line.get("body"), str):
            body = line["body"].encode("utf-8")
        elif line.get("body") is None:
            body = b""
        else:  # the samples' layout: body as parsed JSON, originally compact
            body = json.dumps(line["body"], separators=(",", ":")).encode("utf-8")
        return cls(headers={str(k): str(v) for k, v in (line.get("headers") or {}).items()},
                   body=body, method=str(line.get("method", "POST")),
                   path=str(line.get("path", "/")), received=str(line.get("received", "")))


def now_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def read_recording(path: Path | str) -> list[RecordedRequest]:
    """A ``.jsonl`` recording, or a single ``.json`` request (the samples' layout)."""
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".json"):
        return [RecordedRequest.from_json(json.loads(text))]
    return [RecordedRequest.from_json(json.loads(line)) for line in text.splitlines()
            if line.strip()]


class JsonlWriter:
    """Appends requests to a JSON Lines file, one flushed line each (thread-safe)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self, request: RecordedRequest) -> None:
        line = json.dumps(request.to_json(), separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


# -- the record sink -------------------------------------------------------------------------


@dataclass
class RecordSink:
    """An HTTP sink that records every request it receives (and optionally forwards it).

    Point an ApiServerSource adapter's ``K_SINK`` (or a router subscriber) at ``url``.
    """

    sink: Callable[[RecordedRequest], None]
    port: int = 0
    host: str = "127.0.0.1"
    forward_to: str | None = None
    _server: PostServer | None = field(default=None, init=False)

    def _receive(self, headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        request = RecordedRequest(headers=dict(headers), body=body, method="POST", path=path,
                                  received=now_stamp())
        self.sink(request)
        if self.forward_to is None:
            return 202, ""
        return _post(self.forward_to, request, timeout=30.0)[0] or 502, ""

    def start(self) -> RecordSink:
        self._server = PostServer(self._receive, "record-sink", self.host, self.port)
        self._server.start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return self._server.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def record_sink(out: Path | str, *, port: int = 0, host: str = "127.0.0.1",
                forward_to: str | None = None) -> tuple[RecordSink, JsonlWriter]:
    """Start a sink appending to ``out``; stop the sink, then close the writer."""
    writer = JsonlWriter(out)
    return RecordSink(writer, port, host, forward_to).start(), writer


# -- replay ----------------------------------------------------------------------------------


def mutate(events: Sequence[RecordedRequest], *, shuffle: bool = False,
           duplicate: float = 0.0, drop: float = 0.0, seed: int = 0) -> list[RecordedRequest]:
    """Drop each event with probability ``drop``, repeat each kept one with probability
    ``duplicate`` (the copy lands later in the stream), then shuffle if asked."""
    rng = random.Random(seed)  # noqa: S311 - reproducibility, not secrecy
    kept = [event for event in events if rng.random() >= drop]
    result: list[RecordedRequest] = []
    pending: list[tuple[int, RecordedRequest]] = []
    for index, event in enumerate(kept):
        result.append(event)
        if rng.random() < duplicate:
            pending.append((index + rng.randint(1, 3), event))
        due = [item for item in pending if item[0] <= index]
        pending = [item for item in pending if item[0] > index]
        result.extend(event_copy for _, event_copy in due)
    result.extend(event_copy for _, event_copy in pending)
    if shuffle:
        rng.shuffle(result)
    return result


Sender = Callable[[RecordedRequest], tuple[int | None, float | None]]


@dataclass
class ReplayReport:
    sent: int = 0
    accepted: int = 0
    rejected: list[tuple[int, int | None]] = field(default_factory=list)  # (index, status)
    attempts: int = 0


def replay(events: Iterable[RecordedRequest], to: str | Sender, *, shuffle: bool = False,
           duplicate: float = 0.0, drop: float = 0.0, seed: int = 0, retries: int = 5,
           backoff: float = 0.2, sleep: Callable[[float], None] = time.sleep) -> ReplayReport:
    """Send ``events`` (mutated as asked) one by one to a URL or a sender callable.

    Each is retried like a Broker would (429/5xx/no answer, honouring ``Retry-After``).
    """
    from functions.core.delivery import DeliverySpec, is_success, should_retry

    send: Sender = (lambda request: _post(to, request)) if isinstance(to, str) else to
    spec = DeliverySpec(retry=retries, backoff_policy="exponential", backoff_delay=backoff)
    report = ReplayReport()
    for index, event in enumerate(mutate(list(events), shuffle=shuffle, duplicate=duplicate,
                                         drop=drop, seed=seed)):
        report.sent += 1
        for attempt in range(spec.retry + 1):
            report.attempts += 1
            status, retry_after = send(event)
            if is_success(status):
                report.accepted += 1
                break
            if not should_retry(status) or attempt == spec.retry:
                report.rejected.append((index, status))
                break
            sleep(spec.delay_before(attempt + 1, retry_after))
    return report


def _post(url: str, request: RecordedRequest,
          timeout: float = 30.0) -> tuple[int | None, float | None]:
    result = post_event(url, request.event_headers(), request.body, timeout)
    return result.status, result.retry_after


def in_process_sender(function: str = "all") -> Sender:
    """Deliver straight into a function app in this process (no sockets, and no Broker: the
    app takes the events without a token)."""
    from functions.core.delivery import parse_retry_after
    from functions.core.delivery_auth import DISABLED
    from functions.runtime.app import create_app

    client = create_app(function, warm_up="now", delivery_auth=DISABLED).test_client()

    def send(request: RecordedRequest) -> tuple[int | None, float | None]:
        response = client.post(request.path or "/", headers=request.event_headers(),
                               data=request.body)
        return response.status_code, parse_retry_after(response.headers.get("Retry-After"),
                                                       datetime.now(UTC))

    return send


# -- command line ----------------------------------------------------------------------------


def add_record_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("record", help="an HTTP sink that records every event "
                                   "it receives to a JSON Lines file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--forward", metavar="URL", help="pass each event on (e.g. to the "
                        "router) and answer with its status")
    parser.set_defaults(handler=_record_main)


def _record_main(args: argparse.Namespace) -> int:
    sink, writer = record_sink(args.out, port=args.port, host=args.host,
                               forward_to=args.forward)
    print(f"recording events sent to {sink.url} into {args.out} (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()
        writer.close()
    print(f"{writer.count} events recorded", file=sys.stderr)
    return 0


def add_replay_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("replay", help="send recorded events again")
    parser.add_argument("file", type=Path, help="a .jsonl recording (or one .http.json)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", metavar="URL", help="a router or function URL")
    target.add_argument("--in-process", nargs="?", const="all", metavar="FUNCTION",
                        help="deliver into a function app in this process (default: all)")
    parser.add_argument("--shuffle", action="store_true")
    parser.add_argument("--duplicate", type=_probability, default=0.0, metavar="P")
    parser.add_argument("--drop", type=_probability, default=0.0, metavar="P")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=_replay_main)


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("a probability is between 0 and 1")
    return value


def _replay_main(args: argparse.Namespace) -> int:
    events = read_recording(args.file)
    target: str | Sender = args.to if args.to else in_process_sender(args.in_process)
    report = replay(events, target, shuffle=args.shuffle, duplicate=args.duplicate,
                    drop=args.drop, seed=args.seed)
    print(json.dumps({"read": len(events), "sent": report.sent, "accepted": report.accepted,
                      "attempts": report.attempts, "rejected": report.rejected}))
    return 0 if not report.rejected else 1

