"""Function runtime figures: cold start, import cost, memory per worker, per-event overhead.

``python -m bench.runtime [--repeats N]`` prints JSON. Each figure is the median of N fresh
processes (or of many in-process iterations for the per-event overhead). No API server is
involved: the kubeconfig points at an unused port, which creating a client never contacts,
and the events measured are routed but need no API call.

* ``spawn_to_ready_s``: ``python -m functions serve reconcile`` spawned -> first 200 on
  ``/health/readiness`` (readiness waits for the warm-up: every module and controller loaded
  and the API client built).
* ``spawn_to_first_event_s``: spawned -> first 202 for a CloudEvent.
* ``app_import_s``: a fresh interpreter importing the app module and creating the app (the
  warm-up runs in the background and is measured separately as ``warm_up_s``).
* ``worker_rss_mib``: VmRSS of the gunicorn worker once ready.
* ``baseline_minimal_flask_*``: the same for gunicorn serving a five-line Flask app, to tell
  the machine's speed (load from other work) apart from this package's cost.
* ``parse_route_ms``: parse + route of one event in process (median per event), and
  ``request_ms``: the same through the Flask app with a handler that does nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import summary
from devstack.cluster.ports import free_port
from functions.runtime.sender import post_event
from tests.support import http_status

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "data" / "cloudevents"
FOREIGN_EVENT = "05-openshift-kubevirt-vm-resource-add-via-broker.structured.json"


def _kubeconfig(directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def _controller_modules() -> list[str]:
    from functions.runtime.registry import CONTROLLER_MODULES

    return [name for name in CONTROLLER_MODULES if importlib.util.find_spec(name) is not None]


def _sample(name: str) -> tuple[dict[str, str], bytes]:
    data = json.loads((SAMPLES / name).read_text())
    if "headers" in data:
        skip = {"Host", "Content-Length", "Accept-Encoding"}
        return ({k: v for k, v in data["headers"].items() if k not in skip},
                json.dumps(data["body"], separators=(",", ":")).encode())
    return {"Content-Type": "application/cloudevents+json"}, json.dumps(data).encode()



def time_to_ready_and_event(process: subprocess.Popen[bytes], port: int,
                            headers: dict[str, str], body: bytes,
                            started: float) -> tuple[float, float]:
    """Seconds from ``started`` until readiness answers 200 and until an event gets a 202."""
    ready = event = None
    deadline = started + 30
    while time.perf_counter() < deadline and (ready is None or event is None):
        if process.poll() is not None:
            raise RuntimeError(f"the command exited with {process.returncode}")
        if ready is None and http_status(port, "/health/readiness") == 200:
            ready = time.perf_counter() - started
        if ready is not None and event is None and post_event(
                f"http://127.0.0.1:{port}/", headers, body, 2).status == 202:
            event = time.perf_counter() - started
        time.sleep(0.005)
    if ready is None or event is None:
        raise RuntimeError("the function never became ready")
    return ready, event


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(child) for child in text)
    return found


MINIMAL_APP = """
from flask import Flask
app = Flask(__name__)

@app.get("/health/readiness")
def ready() -> str:
    return "ready"

@app.post("/")
def event() -> tuple[str, int]:
    return "", 202
"""


def cold_start(env: dict[str, str], argv: list[str] | None = None) -> dict[str, float]:
    """``argv`` replaces the function server (the baseline: a minimal Flask app)."""
    port = free_port()
    headers, body = _sample(FOREIGN_EVENT)
    command = [sys.executable, "-m", "functions", "serve", "reconcile", "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1", "--threads", "8"]
    if argv is not None:
        command = [sys.executable, "-m", "gunicorn", "-w", "1", "--threads", "8",
                   "--no-control-socket", "-b", f"127.0.0.1:{port}", *argv]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=env.get("APP_DIR", REPO), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready, event = time_to_ready_and_event(process, port, headers, body, started)
        [worker] = _children(process.pid)
        return {"ready": ready, "event": event, "rss": _rss_mib(worker)}
    finally:
        process.terminate()
        process.wait(timeout=30)


IMPORT_PROBE = """
import time
started = time.perf_counter()
from functions.runtime.app import create_app, runtime_of
app = create_app("reconcile", warm_up="background")
imported = time.perf_counter() - started
runtime = runtime_of(app)
runtime.wait_ready(30)
print(imported, time.perf_counter() - started, runtime.readiness())
"""


def import_cost(env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=REPO, env=env, check=True,
                         capture_output=True, text=True, timeout=60).stdout.split(maxsplit=2)
    if out[2].strip() != "None":
        raise RuntimeError(f"warm-up failed: {out[2]}")
    return {"import": float(out[0]), "warm": float(out[1])}


def per_event(iterations: int) -> dict[str, float]:
    from functions.core.delivery_auth import DISABLED
    from functions.core.events import parse_event
    from functions.kube.client import KubeClient
    from functions.kube.transport import Request, Response
    from functions.runtime.app import create_app
    from functions.runtime.dispatch import Dispatcher
    from functions.runtime.registry import load_controllers

    class NoApi:
        def send(self, request: Request, timeout: float) -> Response:
            raise RuntimeError(f"unexpected API call {request.path}")

        def refresh_credentials(self) -> None:
            pass

    controllers = load_controllers(tuple(_controller_modules()))
    kube = KubeClient(NoApi())
    dispatcher = Dispatcher("reconcile", controllers, lambda: kube, lambda: None)  # type: ignore[arg-type, return-value]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "mnist-worker-0", "namespace": "team-a",
        "labels": {"training.kubeflow.org/job-name": "mnist",
                   "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                             "name": "mnist", "uid": "u", "controller": True}]}}
    events = [_sample(name) for name in (
        "02-captured-resource-update-pytorchjob-status.http.json",
        "03-captured-resource-delete-pytorchjob.http.json", FOREIGN_EVENT)]
    events.append(({"Ce-Specversion": "1.0", "Ce-Type": "dev.knative.apiserver.resource.update",
                    "Ce-Source": "https://10.96.0.1:443", "Ce-Id": "1", "Ce-Kind": "Pod",
                    "Ce-Name": "mnist-worker-0", "Ce-Namespace": "team-a",
                    "Ce-Apiversion": "v1", "Content-Type": "application/json"},
                   json.dumps(pod).encode()))
    samples: list[float] = []
    routed = 0
    for index in range(iterations):
        headers, body = events[index % len(events)]
        started = time.perf_counter()
        routed += len(dispatcher.routes(parse_event(headers, body)))
        samples.append(time.perf_counter() - started)

    from functions.runtime.registry import Controller

    noop = [Controller(c.name, c.parent, {"reconcile": lambda ctx, key: None}, c.children)
            for c in controllers]
    client = create_app("reconcile", controllers=noop, kube_factory=lambda hook: kube,
                        warm_up="now", delivery_auth=DISABLED).test_client()
    requests: list[float] = []
    for index in range(iterations):
        headers, body = events[index % len(events)]
        started = time.perf_counter()
        status = client.post("/", headers=headers, data=body).status_code
        requests.append(time.perf_counter() - started)
        if status != 202:
            raise RuntimeError(f"event {index} answered {status}")
    return {"parse_route": statistics.median(samples) * 1000, "routed": routed / iterations,
            "request": statistics.median(requests) * 1000}


def run(repeats: int = 9, iterations: int = 2000) -> dict[str, Any]:
    """Every figure is a :func:`bench.stats.summary` over ``repeats`` runs."""
    with tempfile.TemporaryDirectory() as tmp:
        # The events are posted straight to the function, with no Broker and no token.
        env = {**os.environ, "KUBECONFIG": str(_kubeconfig(Path(tmp))),
               "FUNCTIONS_CONTROLLER_MODULES": ",".join(_controller_modules()),
               "FUNCTIONS_DELIVERY_AUTH": "none"}
        cold_start(env)  # warm the page cache and write bytecode once
        starts = [cold_start(env) for _ in range(repeats)]
        imports = [import_cost(env) for _ in range(repeats)]
        (Path(tmp) / "minimal_app.py").write_text(MINIMAL_APP)
        baseline_env = {**env, "APP_DIR": tmp}
        baseline = [cold_start(baseline_env, ["minimal_app:app"]) for _ in range(repeats)]
    events = [per_event(iterations) for _ in range(max(1, min(repeats, 5)))]
    return {
        "controllers": ",".join(_controller_modules()),
        "repeats": repeats,
        "spawn_to_ready_s": summary(s["ready"] for s in starts),
        "spawn_to_first_event_s": summary(s["event"] for s in starts),
        "app_import_s": summary(i["import"] for i in imports),
        "warm_up_s": summary(i["warm"] for i in imports),
        "baseline_minimal_flask_spawn_to_ready_s": summary(s["ready"] for s in baseline),
        "worker_rss_mib": summary((s["rss"] for s in starts), 1),
        "baseline_minimal_flask_rss_mib": summary((s["rss"] for s in baseline), 1),
        "parse_route_ms": summary(e["parse_route"] for e in events),
        "request_ms": summary(e["request"] for e in events),
        "routes_per_event": round(events[0]["routed"], 2),
        "load_average": os.getloadavg()[0],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.runtime")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--iterations", type=int, default=2000)
    options = parser.parse_args()
    print(json.dumps(run(options.repeats, options.iterations), indent=2))
