"""The HTTP clients' CPU per request: the API transport against a local API server and the
event sender against a local keep-alive HTTP/1.1 server in another process.

``python -m bench.client [--kubeconfig PATH] [--requests N] [--repeats R]`` prints JSON: each
figure the median over ``repeats`` runs of the process's CPU time (``time.process_time``,
every thread of this process, none of the servers') for ``requests`` requests, per request, in
milliseconds. Without ``--kubeconfig`` a local cluster is started from the Go-built binaries
(``TESTBIN_DIR`` or :func:`devstack.cluster.binaries.ensure_bin_dir`).

* ``get_small_ms``: ``GET /api/v1/namespaces/default`` through ``HttpTransport.send``.
* ``create_pod_ms``: a pod-sized ``POST`` (``dryRun=All``, so nothing is stored, while the
  request and the answer are a pod's) through ``HttpTransport.send``.
* ``urllib3_pool_get_ms``, ``urllib3_pool_manager_get_ms``, ``http_client_get_ms``: the same
  small GET with a bare ``urllib3.HTTPSConnectionPool``, a ``urllib3.PoolManager`` and a
  keep-alive ``http.client.HTTPSConnection``, for reference.
* ``post_keep_alive_ms``: a 3 KB event ``POST`` through ``ConnectionPool.post`` (kept alive),
  and ``post_event_ms``: through ``post_event`` (a connection per event).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import urllib3

from devstack.cluster.ports import free_port
from functions.kube.config import ClusterConfig, from_kubeconfig
from functions.kube.transport import HttpTransport, Request
from functions.runtime.sender import ConnectionPool, post_event

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {
    "generateName": "bench-client-", "namespace": "default",
    "labels": {f"bench.example.com/label-{n}": "x" * 20 for n in range(8)},
    "annotations": {"bench.example.com/note": "y" * 600}},
    "spec": {"containers": [{
        "name": "main", "image": "registry.example.com/training/pytorch:2.5.1-cuda12",
        "command": ["python", "-m", "torch.distributed.run", "train.py"],
        "env": [{"name": f"VAR_{n}", "value": "z" * 30} for n in range(16)],
        "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
        "ports": [{"containerPort": 23456, "name": "pytorchjob-port"}]}],
        "restartPolicy": "Never"}}
EVENT_HEADERS = {"Ce-Specversion": "1.0", "Ce-Type": "dev.knative.apiserver.resource.update",
                 "Ce-Source": "https://10.96.0.1:443", "Ce-Id": "1",
                 "Content-Type": "application/json"}
EVENT = json.dumps({"metadata": {"name": "p", "annotations": {"a": "b" * 2900}}}).encode()

SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def cpu_per_request(action: Callable[[], Any], requests: int, repeats: int) -> float:
    """The median CPU milliseconds per call of ``action`` (after 50 warm-up calls)."""
    for _ in range(50):
        action()
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(requests):
            action()
        runs.append((time.process_time() - started) / requests * 1000)
    return round(statistics.median(runs), 4)


def _context(config: ClusterConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.ca_file)
    if config.client_cert_file:
        context.load_cert_chain(config.client_cert_file, config.client_key_file)
    return context


def api_figures(config: ClusterConfig, requests: int, repeats: int) -> dict[str, float]:
    transport = HttpTransport(config)
    small = Request("GET", "/api/v1/namespaces/default")
    create = Request("POST", "/api/v1/namespaces/default/pods", {"dryRun": "All"},
                     json.dumps(POD).encode(), "application/json")

    def get() -> None:
        assert transport.send(small, 10).status == 200

    def post() -> None:
        assert transport.send(create, 10).status == 201

    figures = {"get_small_ms": cpu_per_request(get, requests, repeats),
               "create_pod_ms": cpu_per_request(post, requests, repeats)}
    url = config.server.removeprefix("https://")
    host, _, port = url.rpartition(":")
    pool = urllib3.HTTPSConnectionPool(host, int(port), ssl_context=_context(config),
                                       maxsize=1, retries=False)
    figures["urllib3_pool_get_ms"] = cpu_per_request(
        lambda: pool.urlopen("GET", "/api/v1/namespaces/default").data, requests, repeats)
    manager = urllib3.PoolManager(ssl_context=_context(config), retries=False)
    figures["urllib3_pool_manager_get_ms"] = cpu_per_request(
        lambda: manager.request("GET", config.server + "/api/v1/namespaces/default").data,
        requests, repeats)
    connection = http.client.HTTPSConnection(host, int(port), context=_context(config))

    def plain() -> None:
        connection.request("GET", "/api/v1/namespaces/default")
        connection.getresponse().read()

    figures["http_client_get_ms"] = cpu_per_request(plain, requests, repeats)
    return figures


def sender_figures(requests: int, repeats: int) -> dict[str, float]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 10
        while post_event(url, EVENT_HEADERS, EVENT, 1).status != 202:
            if time.monotonic() > deadline:
                raise RuntimeError("the event server did not start")
            time.sleep(0.05)
        pool = ConnectionPool()
        return {
            "post_keep_alive_ms": cpu_per_request(
                lambda: pool.post(url, EVENT_HEADERS, EVENT, 5), requests, repeats),
            "post_event_ms": cpu_per_request(
                lambda: post_event(url, EVENT_HEADERS, EVENT, 5), requests // 4, repeats),
        }
    finally:
        server.terminate()
        server.wait(10)


@contextmanager
def api_server(kubeconfig: Path | None) -> Iterator[ClusterConfig]:
    if kubeconfig is not None:
        yield from_kubeconfig(kubeconfig)
        return
    from devstack.cluster.binaries import ensure_bin_dir
    from devstack.cluster.runner import LocalCluster

    testbin = os.environ.get("TESTBIN_DIR")
    with LocalCluster(Path(testbin) if testbin else ensure_bin_dir()) as cluster:
        yield from_kubeconfig(cluster.kubeconfig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client")
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with api_server(args.kubeconfig) as config:
        figures = api_figures(config, args.requests, args.repeats)
    figures.update(sender_figures(args.requests, args.repeats))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
