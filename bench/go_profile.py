"""CPU profiles of the Go processes a burst runs beside the controller: the API server (whose
``/debug/pprof`` it serves to administrators) and the ApiServerSource receive adapter (whose
profiling port Knative's observability configuration turns on).

A profile is taken over a fixed window from the burst's start, then summarised with ``go
tool pprof -traces``: each sample is put in one category, decided by the frame nearest the
leaf that names one (:func:`categorise`), as :mod:`bench.profile` does for Python. Comparing
the API server's categories under two systems says where the requests of one cost it more
than those of the other.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from functions.kube.client import KubeClient

# The observability configuration (JSON, as Knative passes it in K_OBSERVABILITY_CONFIG) that
# makes a receive adapter serve /debug/pprof on its PROFILING_PORT.
ADAPTER_PROFILING = '{"runtime":{"profiling":"enabled"}}'

# (category, substrings of a frame); the first category that the frame nearest the leaf names
# wins. A watch is served by ListResource, so the watch markers must win there.
Categories = tuple[tuple[str, tuple[str, ...]], ...]
APISERVER_CATEGORIES: Categories = (
    ("Go garbage collection", ("runtime.gcBgMarkWorker", "runtime.gcAssistAlloc",
                               "runtime.bgsweep", "runtime.bgscavenge")),
    ("watches (encode, send)", ("(*WatchServer)", "serveWatch", "(*cacheWatcher)",
                                "(*watchEncoder)", "dispatchEvents")),
    ("creates", ("CreateResource", "CreateNamedResource",
                 "createHandler")),
    ("patches", ("(*patcher)", "PatchResource")),
    ("updates", ("UpdateResource",)),
    ("deletes", ("DeleteResource", "DeleteCollection")),
    ("gets", ("GetResource", "getResourceHandler")),
    ("lists", ("ListResource",)),
    ("authentication (TLS client certificates, tokens)", ("AuthenticateRequest",
                                                          "crypto/tls.(*Conn).Handshake")),
    ("authorization", (".Authorize",)),
    ("audit log", ("k8s.io/apiserver/pkg/audit", "plugin/pkg/audit")),
    ("etcd client (watches, storage requests)", ("etcd3.(*watchChan)", "go.etcd.io/")),
    ("connections (TLS, HTTP/2)", ("crypto/tls.", "golang.org/x/net/http2", "net/http.")),
    ("Go scheduler", ("runtime.mcall", "runtime.schedule", "runtime.findRunnable")),
)
ADAPTER_CATEGORIES: Categories = (
    ("Go garbage collection", APISERVER_CATEGORIES[0][1]),
    ("sending the CloudEvent (HTTP)", ("(*ceClient).Send", "sdk-go/v2/protocol/http",
                                       "net/http.(*persistConn)")),
    ("making the CloudEvent (JSON of the object)", ("events.Make", "events.makeEvent")),
    ("source filters", ("subscriptionsapi",)),
    ("the watch (TLS read, JSON decode)", ("(*StreamWatcher)", "(*Reflector)",
                                           "watch.(*Decoder)", "http2.(*ClientConn)")),
    ("Go scheduler", APISERVER_CATEGORIES[-1][1]),
)
OTHER = "other"
_VALUE = re.compile(r"^\s*(\d+(?:\.\d+)?)(ns|us|µs|ms|s)\s+(.*)$")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_traces(text: str) -> list[tuple[list[str], float]]:
    """``go tool pprof -traces`` output: per sample stack, its frames from the leaf to the
    root and its seconds."""
    stacks: list[tuple[list[str], float]] = []
    frames: list[str] = []
    seconds = 0.0
    for line in text.splitlines():
        if line.startswith("-----------+"):
            if frames:
                stacks.append((frames, seconds))
            frames, seconds = [], 0.0
            continue
        if not frames and seconds == 0.0:
            found = _VALUE.match(line)
            if found is not None:
                seconds = float(found.group(1)) * _UNIT[found.group(2)]
                frames.append(found.group(3).strip())
            continue
        if line.strip() and frames:
            frames.append(line.strip())
    if frames:
        stacks.append((frames, seconds))
    return stacks


def categorise(frames: Iterable[str], categories: Categories) -> str:
    """The category of one sample, ``frames`` from the leaf to the root (used for py-spy's
    samples too, by :func:`bench.profile.categorise`)."""
    for frame in frames:
        for category, markers in categories:
            if any(marker in frame for marker in markers):
                return category
    return OTHER


def summarise(stacks: list[tuple[list[str], float]], categories: Categories) -> dict[str, Any]:
    """Seconds and shares per category, the largest first."""
    total = sum(seconds for _, seconds in stacks)
    by_category: defaultdict[str, float] = defaultdict(float)
    for frames, seconds in stacks:
        by_category[categorise(frames, categories)] += seconds
    ranked = sorted(by_category.items(), key=lambda item: -item[1])
    return {"seconds": round(total, 2),
            "categories": {c: {"seconds": round(s, 2), "share": round(s / total, 3)}
                           for c, s in ranked} if total else {}}


def category_table(categories: Mapping[str, Mapping[str, float]]) -> list[str]:
    """A summary's categories as a Markdown table (seconds and share)."""
    return ["| category | seconds | share |", "| --- | --- | --- |",
            *(f"| {c} | {v['seconds']} | {v['share']:.0%} |" for c, v in categories.items())]


def go_tool() -> str | None:
    """The ``go`` command that reads the profiles (the one that built the binaries)."""
    return shutil.which("go")


def traces(go: str, profile: Path) -> str:
    return subprocess.run([go, "tool", "pprof", "-traces", str(profile)], check=True,
                          capture_output=True, text=True, timeout=300).stdout


class GoProfile:
    """One CPU profile of ``seconds``, fetched in the background from the moment it starts;
    :meth:`wait` returns the file it was written to, or ``None`` (and why, in ``error``)."""

    def __init__(self, fetch: Callable[[int], bytes], seconds: int, out: Path) -> None:
        self.out, self.error = out, ""
        self._thread = threading.Thread(target=self._run, args=(fetch, seconds), daemon=True)
        self._thread.start()

    def _run(self, fetch: Callable[[int], bytes], seconds: int) -> None:
        try:
            self.out.write_bytes(fetch(seconds))
        except Exception as exc:  # reported with the results
            self.error = f"{type(exc).__name__}: {exc}"

    def wait(self, timeout: float) -> Path | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.error = self.error or f"no profile within {timeout:.0f} s"
        return None if self.error or not self.out.exists() else self.out


def from_apiserver(admin: KubeClient) -> Callable[[int], bytes]:
    def fetch(seconds: int) -> bytes:
        response = admin.call("get", "GET", "/debug/pprof/profile",
                              query={"seconds": str(seconds)})
        if response.status != 200:
            raise RuntimeError(f"the API server answered {response.status}")
        return response.body
    return fetch


def from_port(port: int) -> Callable[[int], bytes]:
    def fetch(seconds: int) -> bytes:
        url = f"http://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
        with urllib.request.urlopen(url, timeout=seconds + 60) as answer:
            data: bytes = answer.read()
        return data
    return fetch


def process_environment(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}
