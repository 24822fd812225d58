"""Every figure the README and docs/ state comes from a committed benchmark result: those of
docs/performance.md from the benchmark run (bench/results/latest.json) and the profile
(bench/results/profile.json), the start-up and build times of docs/dev-stack.md (and the
README's first build) from bench/results/devstack.json, and the settings docs/architecture.md
states from the code and manifests that have them. When one changes without the other, this
fails."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import burst_functions, report_burst, report_steady
from tests.deploy.support import FUNCTIONS
from tests.support import REPO

RESULTS = json.loads((REPO / "bench" / "results" / "latest.json").read_text())
DOCS = REPO / "docs"
MEASURED = (DOCS / "performance.md").read_text()


def flat(path: Path) -> str:
    """A page's text with each run of line breaks and spaces as one space."""
    return " ".join(path.read_text().split())


PERFORMANCE = flat(DOCS / "performance.md")
DEV_STACK = flat(DOCS / "dev-stack.md")
ARCHITECTURE = flat(DOCS / "architecture.md")
README = flat(REPO / "README.md")


def result(path: str) -> Any:
    node: Any = RESULTS
    for part in path.split("/"):
        node = node[part]
    return node


def median(path: str) -> float:
    node = result(path)
    return float(node["median"] if isinstance(node, dict) else node)


def stated(text: str) -> str:
    """The figure a snippet of the docs states: its first number, or its last when the snippet ends
    a table cell (the cells before it only place it in its row)."""
    numbers = [w for w in text.replace("*", "").split() if w[:1].isdigit()]
    return numbers[-1] if text.endswith("|") else numbers[0]


def part_medians(path: str, parts: set[str], inside: bool) -> float:
    """The sum of the medians of the event path's CPU to T of the parts in ``parts`` (or, with
    ``inside`` false, of every other part)."""
    # the medians have two decimals: so has their sum, whatever order it was added in
    return round(sum(seconds for part, seconds in report_burst.event_path_parts(result(path))
                     if (part in parts) == inside), 2)


B2, B10 = "burst/jobs_200", "burst/jobs_1000"
REQUESTS = "controller_requests_per_job/total_requests"
EVENTS = "controller_requests_per_job/by_verb_resource/create events"


@pytest.mark.parametrize(("path", "text", "digits"), [
    pytest.param("cluster/cluster_start_s", "2.8 s", 1, id="cluster-start"),
    pytest.param("cluster/cluster_stop_s", "1.3 s", 1, id="cluster-stop"),
    pytest.param("runtime/spawn_to_ready_s", "0.77 s", 2, id="spawn-to-ready"),
    pytest.param("runtime/worker_rss_mib", "90.9 MiB", 1, id="worker-rss"),
    pytest.param("runtime/parse_route_ms", "0.057 ms", 3, id="parse-route"),
    pytest.param("throughput/job_events_per_s", "965", 0, id="events-per-second"),
    pytest.param("runtime/baseline_minimal_flask_spawn_to_ready_s", "under gunicorn: 0.18 s", 2,
                 id="bare-flask-spawn"),
    pytest.param("runtime/app_import_s", "| 0.12 s / 90.9", 2, id="app-import"),
    pytest.param("runtime/request_ms", "ms / 0.28 ms", 2, id="whole-request"),
    pytest.param("resync/status/wall_s", "/ 0.6 s / 0.4 s, 0 writes", 1, id="resync-status"),
    pytest.param("jobs/jobs_200/requests_per_job", "objects, 19 requests per job", 0,
                 id="controllers-alone-requests"),
    pytest.param("trainer/first_reconcile_s", "4.2 s", 1, id="trainer-first"),
    pytest.param("trainer/steady_reconcile_s", "0.09 s", 2, id="trainer-steady"),
    pytest.param("jobs/jobs_200/ours_s", "11.1 s", 1, id="controllers-alone"),
    pytest.param("jobs/jobs_200/limit_create_loop_s", "vs 8.0 s for a create loop", 1,
                 id="controllers-alone-limit"),
    pytest.param("runtime/load_average", "load average 0.4 during", 1, id="load-average"),
    pytest.param("throughput/scale_out/replicas_2_job_events_per_s", "/ 2,043 / 2,062", 0,
                 id="events-per-second-2"),
    pytest.param("throughput/scale_out/replicas_4_job_events_per_s", "/ 2,062 (2 cores", 0,
                 id="events-per-second-4"),
    pytest.param("resync/gc/wall_s", "/ 0.4 s, 0 writes", 1, id="resync-gc"),
    pytest.param("resync/reconcile/api_requests", "watch caches, 18 /", 0,
                 id="resync-reconcile-requests"),
    pytest.param("resync/status/api_requests", "/ 9 / 10 requests)", 0,
                 id="resync-status-requests"),
    pytest.param("resync/gc/api_requests", "/ 10 requests)", 0, id="resync-gc-requests"),
    pytest.param("coldburst/spawn_to_ready_s", "| 0.42 s / 2.18", 2, id="cold-ready"),
    pytest.param("coldburst/spawn_to_all_running_s", "/ 3.5 s; 0 dead letters", 1,
                 id="cold-all-running"),
    pytest.param(f"{B2}/ours/event_path_cpu_s_at_created", "its adapter spends\n2.8 s", 1,
                 id="emulated-event-path-200"),
    pytest.param("resync/reconcile/wall_s", "| 1.0 s /", 1, id="resync-reconcile"),
    pytest.param("coldburst/spawn_to_first_event_s", "2.18 s", 2, id="cold-first-event"),
    pytest.param("coldburst/dead_letters", "0 dead letters", 0, id="cold-dead-letters"),
    pytest.param(f"{B2}/limit/created_s", "9.7 s", 1, id="limit-200"),
    pytest.param(f"{B2}/go-default/created_s", "128.8 s", 1, id="go-default-200"),
    pytest.param(f"{B2}/go-tuned/created_s", "| 12.0 s", 1, id="go-tuned-200"),
    pytest.param(f"{B2}/go-tuned/running_s", "12.0 s | 12.6 s |", 1, id="go-tuned-running-200"),
    pytest.param(f"{B2}/go-tuned/controller_cpu_s_at_created", "2.4 / 3.3 s", 1,
                 id="go-tuned-cpu-200"),
    pytest.param(f"{B2}/ours/created_s", "**15.8 s**", 1, id="ours-200"),
    pytest.param(f"{B2}/ours/running_s", "**18.9 s**", 1, id="ours-running-200"),
    pytest.param(f"{B2}/ours/{REQUESTS}", "**14.0**", 1, id="ours-requests-200"),
    pytest.param(f"{B2}/ours/dead_letters", "**0**", 0, id="ours-dead-200"),
    pytest.param(f"{B2}/ours-x4/running_s", "23.9 s", 1, id="ours-x4-running-200"),
    pytest.param(f"{B10}/limit/created_s", "| 58.1 s", 1, id="limit-1000"),
    pytest.param(f"{B10}/limit/sweep/threads_8/created_s", "alone takes 74.6 s", 1,
                 id="create-loop-8-threads-1000"),
    pytest.param(f"{B10}/go-tuned/created_s", "76.1 s", 1, id="go-tuned-1000"),
    pytest.param(f"{B10}/go-tuned/running_s", "81.1 s", 1, id="go-tuned-running-1000"),
    pytest.param(f"{B10}/ours/created_s", "**88.4 s**", 1, id="ours-1000"),
    pytest.param(f"{B10}/ours/running_s", "**100.2 s**", 1, id="ours-running-1000"),
    pytest.param(f"{B10}/ours/{REQUESTS}", "**14.1**", 1, id="ours-requests-1000"),
    pytest.param(f"{B10}/ours/jobs_not_running", "**0**", 0, id="ours-all-running-1000"),
    pytest.param(f"{B2}/ours-knative/created_s", "| 23.8 s", 1, id="knative-200"),
    pytest.param(f"{B2}/ours-knative/running_s", "| 24.1 s", 1, id="knative-running-200"),
    pytest.param(f"{B2}/ours-knative/controller_cpu_s_at_created", "| 5.8 / 8.2 s", 1,
                 id="knative-cpu-200"),
    pytest.param(f"{B2}/ours-knative/controller_cpu_s_at_end", "/ 8.2 s", 1,
                 id="knative-cpu-end-200"),
    pytest.param(f"{B2}/ours-knative/{REQUESTS}", "| 14.5 |", 1, id="knative-requests-200"),
    pytest.param(f"{B2}/ours-knative/event_path_cpu_s_at_created", "10.6 s of CPU", 1,
                 id="knative-event-path-200"),
    pytest.param(f"{B2}/ours-knative/apiserver_cpu_s_at_created", "spends 18.4 s", 1,
                 id="knative-apiserver-200"),
    pytest.param(f"{B2}/ours/apiserver_cpu_s_at_created", "against 13.0 s", 1,
                 id="emulated-apiserver-200"),
    pytest.param(f"{B2}/ours-knative/dead_letters", "| 14.5 | 0 |", 0, id="knative-dead-200"),
    pytest.param(f"{B10}/ours-knative/created_s", "| 130.1 s", 1, id="knative-1000"),
    pytest.param(f"{B10}/ours-knative/running_s", "| 130.4 s", 1, id="knative-running-1000"),
    pytest.param(f"{B10}/ours-knative/event_path_cpu_s_at_created", "CPU: 51.0 s", 1,
                 id="knative-event-path-1000"),
    pytest.param(f"{B10}/ours-knative/dead_letters", "| 14.5 | 0 |", 0, id="knative-dead-1000"),
    pytest.param(f"{B2}/ours/{EVENTS}", "ours wrote 6.0 per job", 1, id="ours-events-200"),
    pytest.param(f"{B2}/ours/settled_s", "the last 20.9 s after", 1, id="ours-events-done-200"),
    pytest.param(f"{B2}/go-tuned/{EVENTS}", "operator 5.9 per job", 1, id="go-events-200"),
    pytest.param(f"{B2}/go-tuned/settled_s", "the last at 15.2 s", 1, id="go-events-done-200"),
    pytest.param(f"{B10}/go-tuned/{EVENTS}", "only 2.0 per job", 1, id="go-events-1000"),
    pytest.param(f"{B10}/ours/{EVENTS}", "and wrote 6.0 per job", 1, id="ours-events-1000"),
    pytest.param(f"{B10}/ours/controller_cpu_s_at_created", "spent 23.5 s of CPU to T", 1,
                 id="replicas-1-cpu-1000"),
    pytest.param(f"{B10}/ours-x2/controller_cpu_s_at_created", "each, 27.8 s with 2", 1,
                 id="replicas-2-cpu-1000"),
    pytest.param(f"{B10}/ours-x4/controller_cpu_s_at_created", "and 44.6 s with 4", 1,
                 id="replicas-4-cpu-1000"),
    pytest.param(f"{B10}/ours/created_s", "88.4 s, 83.8", 1, id="replicas-1-t-1000"),
    pytest.param(f"{B10}/ours-x2/created_s", "83.8 s and 98.8", 1, id="replicas-2-t-1000"),
    pytest.param(f"{B10}/ours-x4/created_s", "and 98.8 s (one run each). A replica", 1,
                 id="replicas-4-t-1000"),
    pytest.param(f"{B10}/ours-x4/{REQUESTS}", "function, 14.1 requests per job at 1,000", 1,
                 id="replicas-4-requests-1000"),
])
def test_stated_figure_is_the_committed_result(path: str, text: str, digits: int) -> None:
    number = stated(text).replace(",", "")
    assert f"{median(path):.{digits}f}" == number, (path, median(path))
    assert text in MEASURED, text


TIMES = "\N{MULTIPLICATION SIGN}"


def ratio(size: str, system: str, figure: str, to: str = "go-tuned") -> str:
    value = median(f"{size}/{system}/{figure}") / median(f"{size}/{to}/{figure}")
    return f"{value:.2f}{TIMES}"


def test_ratios_to_the_go_operator_are_the_committed_results() -> None:
    """docs/performance.md: how ours compares with the tuned Go operator, emulated and real."""
    text = PERFORMANCE
    assert (f"T is {ratio(B2, 'ours', 'created_s')} the tuned Go operator's at 200 jobs and "
            f"{ratio(B10, 'ours', 'created_s')} at 1,000, every job Running "
            f"{ratio(B2, 'ours', 'running_s')} and {ratio(B10, 'ours', 'running_s')}, and the "
            f"controller CPU to T {ratio(B2, 'ours', 'controller_cpu_s_at_created')} and "
            f"{ratio(B10, 'ours', 'controller_cpu_s_at_created')}") in text
    most = max(median(f"{size}/{system}/{REQUESTS}") for size in (B2, B10)
               for system in ("ours", "ours-knative"))
    go = [f"{median(f'{size}/go-tuned/{REQUESTS}'):.1f}" for size in (B2, B10)]
    assert most <= 16, most
    assert (f"with one replica per function at most 16 requests per job (the tuned Go "
            f"operator: {go[0]} at 200 jobs, {go[1]} at 1,000") in text
    assert (f"takes {ratio(B2, 'ours-knative', 'created_s')} the tuned Go operator's time at "
            f"200 jobs and {ratio(B10, 'ours-knative', 'created_s')} at 1,000") in text
    # the systems compared side by side ran on clusters with the same controllers
    for size in (B2, B10):
        found = {result(f"{size}/{s}").get("cluster_controllers")
                 for s in ("limit", "go-tuned", "ours", "ours-knative")}
        assert len(found) == 1 and "endpoints-controller" in str(found), (size, found)


LOCAL_NETWORK = {"pod-network-relays", "cluster-network"}


def test_splits_the_real_event_path_as_the_committed_result() -> None:
    """docs/performance.md: of the event path's CPU on the real data plane, how much is the local
    pod network and how much Knative's own containers."""
    local = part_medians(f"{B2}/ours-knative", LOCAL_NETWORK, inside=True)
    knative = part_medians(f"{B2}/ours-knative", LOCAL_NETWORK, inside=False)
    text = PERFORMANCE
    assert f"Of that, {local:.1f} s is this machine's stand-in for a pod network" in text
    assert f"{knative:.1f} s is Knative's own containers" in text
    eventing = " ".join((REPO / "eventing" / "README.md").read_text().split())
    assert "Knative's containers (adapter, ingress, dispatcher, filter) spend more CPU than" \
        " the three functions" in eventing
    assert knative > median(f"{B2}/ours-knative/controller_cpu_s_at_created")


PROFILE = json.loads((REPO / "bench" / "results" / "profile.json").read_text())
API = "API client (HTTP, JSON)"
SERVING = ("HTTP serving (gunicorn, WSGI)", "runtime (route, coalesce, answer)")
HANDLERS = "handlers (read, plan, status)"


def test_profile_claims_are_the_committed_profile() -> None:
    """docs/performance.md: "in reconcile, the API requests take the largest share of its time; in
    status, serving the deliveries takes more than computing the status"."""
    text = PERFORMANCE
    seconds = {name: {c: v["seconds"] for c, v in found["categories"].items()}
               for name, found in PROFILE["processes"].items()}
    reconcile, status = seconds["reconcile"], seconds["status"]
    total = sum(reconcile.values())
    assert (f"in reconcile, the API requests (creating pods, services and Events) take the "
            f"largest share of its time ({reconcile[API]:.1f} s of {total:.1f} s)") in text
    assert max(reconcile, key=lambda c: reconcile[c]) == API
    serving = sum(status.get(c, 0.0) for c in SERVING)
    assert (f"in status, serving the deliveries (gunicorn and the runtime: {serving:.1f} s) "
            f"takes more than computing the status ({status[HANDLERS]:.1f} s)") in text
    assert serving > status[HANDLERS]


def test_wall_clock_claims_are_the_committed_profile() -> None:
    """docs/performance.md: the functions' request threads mostly wait for the API server's
    answers, on both data planes; status's next wait is the running pass of the same job."""
    text = PERFORMANCE
    api, same_job = ("API requests (mostly waiting for the answer)",
                     "waiting for the running pass of the same job")

    def share(wall: dict[str, Any], function: str, category: str) -> float:
        return float(wall[function]["categories"][category]["share"])

    emulated, knative = PROFILE["wall"], PROFILE["knative"]["wall"]
    assert (f"they mostly wait for the API server's answers (reconcile "
            f"{share(emulated, 'reconcile', api):.0%} of the time, its pass creating a job's "
            f"pods and services; status {share(emulated, 'status', api):.0%}, its status "
            f"writes), and status's next most for the running pass of the same job "
            f"({share(emulated, 'status', same_job):.0%}); on the real data plane, "
            f"{share(knative, 'reconcile', api):.0%} and {share(knative, 'status', api):.0%}"
            ) in text
    for wall in (emulated, knative):
        for function in ("reconcile", "status"):
            assert share(wall, function, api) > 0.5
        status = wall["status"]["categories"]
        assert sorted(status, key=lambda c: -status[c]["share"])[:2] == [api, same_job]


def test_api_server_claims_are_the_committed_results() -> None:
    """docs/performance.md: the API server spent about as much to T under ours as under the
    tuned Go operator at both sizes (within a quarter either way), ours' own processes more
    than that, and every process but the functions under ours more than every process under
    the Go operator (the benchmark's medians); in the profile, creates lead; the adapter's
    largest share is its watch."""
    text = PERFORMANCE

    def cpu(size: str, system: str, part: str) -> float:
        return median(f"{size}/{system}/{part}_cpu_s_at_created")

    figures = {size: (cpu(size, "ours", "apiserver"), cpu(size, "go-tuned", "apiserver"))
               for size in (B2, B10)}
    (ours, theirs), (ours_10, theirs_10) = figures[B2], figures[B10]
    assert ("The API server spends about as much under ours for the same writes at both sizes: "
            f"to T, {ours:.1f} s of CPU against {theirs:.1f} s under the tuned Go operator at "
            f"200 jobs, and {ours_10:.1f} s against {theirs_10:.1f} s at 1,000") in text
    assert 0.8 <= ours / theirs <= 1.25  # about as much
    assert 0.8 <= ours_10 / theirs_10 <= 1.25
    functions, go, adapter_cpu = (cpu(B2, "ours", "controller"), cpu(B2, "go-tuned", "controller"),
                                  cpu(B2, "ours", "event_path"))
    assert (f"the functions, {functions:.1f} s to T against the Go operator's {go:.1f} s at 200 "
            f"jobs, and the event path's adapter, {adapter_cpu:.1f} s") in text
    for size, (api_ours, api_go) in figures.items():
        own = cpu(size, "ours", "controller") + cpu(size, "ours", "event_path")
        assert own - cpu(size, "go-tuned", "controller") > api_ours - api_go
    # every process but the functions under ours against every process under the Go operator
    parts = ("apiserver", "etcd", "bench_process")
    go_total = sum(cpu(B2, "go-tuned", p) for p in (*parts, "controller"))
    ours_besides = sum(cpu(B2, "ours", p) for p in (*parts, "event_path"))
    assert (f"the Go operator's run spends {go_total:.1f} s of CPU (the API server, the "
            f"operator, etcd and the benchmark's process), and ours {ours_besides:.1f} s before "
            f"its functions' {functions:.1f} s") in text
    assert ours_besides > go_total
    go = PROFILE["go"]
    profiled = {name: found["categories"] for name, found in go.items() if "categories" in found}
    under_ours, under_go = profiled["API server under ours"], profiled["API server under go-tuned"]
    connections = "connections (TLS, HTTP/2)"
    assert (f"creates take the most under ours ({under_ours['creates']['seconds']:.1f} s of "
            f"{go['API server under ours']['seconds']:.1f} s) and under the Go operator "
            f"({under_go['creates']['seconds']:.1f} s of "
            f"{go['API server under go-tuned']['seconds']:.1f} s, just ahead of its connections' "
            f"TLS and HTTP/2: {under_go[connections]['seconds']:.1f} s)") in text
    assert max(under_ours, key=lambda c: under_ours[c]["seconds"]) == "creates"
    assert sorted(under_go, key=lambda c: -under_go[c]["seconds"])[:2] == ["creates",
                                                                           connections]
    adapter = profiled["receive adapter odh-training-objects under ours"]
    watch = adapter["the watch (TLS read, JSON decode)"]["share"]
    assert f"which spends {watch:.0%} of its time reading and decoding its watch" in text
    assert watch == max(c["share"] for c in adapter.values())
    from bench.profile import run
    window = inspect.signature(run).parameters["go_seconds"].default
    assert PROFILE.get("go_seconds", window) == window
    assert f"over the first {window} s of each burst" in text


COMPARED = frozenset({"limit", "go-tuned", "ours", "ours-x2", "ours-x4", "ours-knative"})


def test_burst_rows_come_from_one_command() -> None:
    """docs/performance.md: the systems compared side by side were measured by the last command
    that measured the burst, at both sizes, and the rest by an earlier run of the whole suite
    on the same machine."""
    from bench.__main__ import burst_systems, measured

    commands = [RESULTS.get("command", ""), *(u["command"] for u in RESULTS.get("updates", []))]
    burst = [c for c in commands if "burst" in measured(c)[0]]
    assert burst and any(measured(c)[1] for c in burst), commands
    last = burst[-1]
    assert "--burst-no-large" not in last and "--burst-large-only" not in last, last
    assert "--quick" not in last, last
    systems = burst_systems(last)
    assert systems is None or systems == COMPARED, last
    text = PERFORMANCE
    if systems is None:
        assert "every system measured by the same command" in text
    else:
        assert ("the API server's limit, the tuned Go operator and every system of ours "
                "measured by one command (round-robin), the Go operator's defaults by an "
                "earlier run of the whole suite") in text


def test_event_priority_is_the_recorders_and_the_benchmarks() -> None:
    """docs/performance.md: how long Events wait, how many a function queues, and when a
    burst run ends."""
    from bench.burst import SETTLE_QUIET
    from functions.runtime.recorder import HOLD_SECONDS, EventRecorder
    from functions.runtime.serve import EVENT_FLUSH_SECONDS

    text = PERFORMANCE
    assert f"Events wait (at most {HOLD_SECONDS:.0f} s; a Warning never waits)" in text
    assert (f"first sends the Events it still holds, for at most {EVENT_FLUSH_SECONDS:.0f} s"
            in text)
    assert f"ours queues up to {EventRecorder.queue_size:,}" in text
    assert f"Events have not changed for {SETTLE_QUIET:.0f} s" in text


DEVSTACK = json.loads((REPO / "bench" / "results" / "devstack.json").read_text())


def test_start_up_times_are_the_committed_devstack_result() -> None:
    """docs/dev-stack.md, `make dev`: how long the stack takes to be ready."""
    knative, emulated = DEVSTACK["knative"]["ready_s"], DEVSTACK["emulated"]["ready_s"]
    assert (f"ready in {knative['median']:.1f} s on a 2-core machine (median of "
            f"{DEVSTACK['repeats']} starts, {knative['min']:.1f} to {knative['max']:.1f} s; the "
            f"emulated path: {emulated['median']:.1f} s") in DEV_STACK


def test_build_times_are_the_committed_build_records() -> None:
    """docs/dev-stack.md, The two commands: each group's cold build; the README's
    requirements: the first build's time."""
    builds = DEVSTACK["build_seconds"]
    assert (f"is kubernetes {builds['kubernetes']} s, kwok {builds['kwok']} s, etcd "
            f"{builds['etcd']} s, kustomize {builds['kustomize']} s and the Knative Eventing "
            f"commands {builds['knative']} s") in DEV_STACK
    together = sum(builds[g] for g in ("kubernetes", "kwok", "etcd", "kustomize", "knative"))
    assert f"{together / 60:.1f} minutes together" in DEV_STACK
    assert f"baseline ({builds['training-operator']} s;" in DEV_STACK
    assert (f"their cold builds took {builds['trainer']} s and {builds['jobset']} s more"
            in DEV_STACK)
    everything = together + builds["trainer"] + builds["jobset"]
    assert f"({everything / 60:.1f} minutes for every group together)" in DEV_STACK
    assert f"A cold build takes about {everything / 60:.0f} minutes" in DEV_STACK
    assert f"about {everything / 60:.0f} minutes on a 2-core machine" in README


def test_sweep_figures_are_the_informers() -> None:
    """docs/architecture.md and eventing/README.md: how often the informers sweep their
    journals and how old a change no event brought must be."""
    from functions.kube.gaps import (
        JOURNAL_SECONDS,
        LAG_LIMIT_SECONDS,
        LAG_WINDOW_SECONDS,
        SWEEP_DEFER_SECONDS,
        SWEEP_HOLD_SECONDS,
        SWEEP_QUIET_SECONDS,
        SWEEP_SECONDS,
    )

    eventing = " ".join((REPO / "eventing" / "README.md").read_text().split())
    for text in (ARCHITECTURE, eventing):
        assert f"sweep their journals every {SWEEP_SECONDS:.0f} s" in text
    assert f"a change no event brought within {SWEEP_HOLD_SECONDS:.0f} s" in ARCHITECTURE
    assert f"has had no event for {SWEEP_QUIET_SECONDS:.0f} s" in ARCHITECTURE
    assert f"what changed at least {SWEEP_HOLD_SECONDS:.0f} s before" in eventing
    assert (f"have had no event for {SWEEP_QUIET_SECONDS:.0f} s (at most "
            f"{SWEEP_DEFER_SECONDS:.0f} s)") in eventing
    assert f"a journal of the changes it applied (the last {JOURNAL_SECONDS:.0f} s" in eventing
    assert (f"how late the events have come in the last {LAG_WINDOW_SECONDS:.0f} s (at most "
            f"{LAG_LIMIT_SECONDS:.0f} s" in eventing)


def test_full_collections_wait_for_the_quiet_the_functions_report() -> None:
    """docs/performance.md: when a function runs Python's full collections (the collector's own
    rules are tests/runtime/test_collector.py)."""
    from functions.kube.gaps import SWEEP_QUIET_SECONDS
    from functions.runtime.collector import OLDEST_THRESHOLD

    text = PERFORMANCE
    assert (f"runs one itself once it has had no event for {SWEEP_QUIET_SECONDS:.0f} s "
            "(`functions/runtime/collector.py`)") in text
    assert OLDEST_THRESHOLD >= 100_000   # CPython's own full collections never come due


def test_kwok_parallelism_is_the_one_the_burst_ran_with() -> None:
    """docs/performance.md: how many pod changes kwok plays at once, in every committed run."""
    from devstack.cluster.kwok import POD_PLAY_PARALLELISM

    assert f"plays {POD_PLAY_PARALLELISM} pod changes at once" in MEASURED
    for size in ("jobs_200", "jobs_1000"):
        for system, summary in RESULTS["burst"][size].items():
            if isinstance(summary, dict) and "created_s" in summary:
                assert summary.get("kwok_pod_play_parallelism") == POD_PLAY_PARALLELISM, \
                    (size, system)


def test_function_concurrency_is_the_deployed_one() -> None:
    """docs/architecture.md, What runs where: the functions' containerConcurrency (and threads) as
    config/serving deploys it."""
    deployed = {yaml.safe_load((REPO / "config" / "serving" / f"{function}.yaml").read_text())
                ["spec"]["template"]["spec"]["containerConcurrency"] for function in FUNCTIONS}
    [concurrency] = deployed   # the page states one figure for all three
    assert (f"`containerConcurrency` equal to their gunicorn threads ({concurrency} "
            "for reconcile, gc and status, as more contend for the GIL)") in ARCHITECTURE


def test_chain_of_the_real_data_plane_is_the_committed_result() -> None:
    """docs/performance.md: on the real data plane, reconcile's handler time beside T, each
    function's deliveries per job, and how long after T every job was Running."""
    knative = result(f"{B2}/ours-knative")
    figures = burst_functions.per_job(knative["function_figures"], 200)
    text = PERFORMANCE
    t = median(f"{B2}/ours-knative/created_s")
    reconcile = figures["reconcile"]["handler_s"]
    assert (f"reconcile's handlers ran for {reconcile:.1f} s in all against a T of {t:.1f} s"
            in text)
    assert (f"Each job reached reconcile {figures['reconcile']['deliveries']:g} times, status "
            f"{figures['status']['deliveries']:g} and gc {figures['gc']['deliveries']:g}") in text

    def lag(system: str) -> str:
        return (f"{median(f'{B2}/{system}/running_s') - median(f'{B2}/{system}/created_s'):.1f}"
                " s")

    assert (f"every job is Running {lag('ours-knative')} after T (the tuned Go operator: "
            f"{lag('go-tuned')})") in text


SCALE = json.loads((REPO / "bench" / "results" / "scale.json").read_text())


def test_scale_figures_are_the_committed_scale_result() -> None:
    """docs/performance.md, "As the cluster grows": every figure is bench/results/scale.json's."""
    sizes = {size["jobs"]: size for size in SCALE["sizes"]}
    rows = []
    for jobs, label in ((1000, "1,000"), (5000, "5,000")):
        size = sizes[jobs]
        ours = [size[f] for f in ("reconcile", "status", "gc")]
        go = size["go-tuned"]
        rows.append(
            f"| {label} | {' / '.join(str(f['first_pass_s']) for f in ours)} s; "
            f"{go['first_pass_s']} s | {' / '.join(str(f['wake_s']) for f in ours)} s | "
            f"{size['ours_rss_mib']} MiB; {go['rss_mib']} MiB |")
    small, large = sizes[1000], sizes[5000]
    ours_slope = round((large["ours_rss_mib"] - small["ours_rss_mib"]) / 4, 1)
    go_slope = round((large["go-tuned"]["rss_mib"] - small["go-tuned"]["rss_mib"]) / 4, 1)

    stated_texts = [
        *rows,
        f"its workers {large['go-tuned']['synced_s']} s after spawn",
        f"reaches the new one after {large['go-tuned']['first_pass_s']} s",
        f"Memory grows {ours_slope} MiB per 1,000 jobs for ours, {go_slope} MiB for Go",
        f"{large['reconcile']['list_mib']} MiB for reconcile against "
        f"{large['go-tuned']['list_mib']} MiB",
        f"takes reconcile {large['reconcile']['resync_s']} s and "
        f"{large['reconcile']['resync_requests']:,} requests",
        f"takes {large['reconcile']['rewake_s']} s once they are full",
        f"({large['go-tuned']['rss_mib']} MiB at 5,000 jobs)",
    ]
    for size in sizes.values():
        assert [size[f]["resync_writes"] for f in ("reconcile", "status", "gc")] == [0, 0, 0]
    for text in stated_texts:
        assert " ".join(text.split()) in PERFORMANCE, text


def test_cache_heap_figures_are_the_committed_profile() -> None:
    """docs/performance.md: what the caches' objects take, from bench/results/cache_memory.json."""
    profile = json.loads((REPO / "bench" / "results" / "cache_memory.json").read_text())
    pods = profile["status"]["kinds"]["pods"]
    stated_texts = [
        f"at {profile['jobs']:,} jobs they take "
        + " / ".join(str(profile[f]["heap_mib"]) for f in ("reconcile", "status", "gc"))
        + " MiB of Python heap",
        f"the {pods['objects']:,} pods {pods['heap_mib']} MiB of it, "
        f"{round(pods['heap_mib'] / pods['json_mib'], 1)} times their {pods['json_mib']} MiB",
    ]
    for text in stated_texts:
        assert text in PERFORMANCE, text


STEADY = json.loads((REPO / "bench" / "results" / "steady.json").read_text())


def steady_row(run: dict[str, Any]) -> str:
    """A run of bench/results/steady.json as docs/performance.md's table shows it."""
    def cells(figures: dict[str, float | None]) -> str:
        return " / ".join("never" if figures[p] is None else f"{figures[p]:g}"
                          for p in ("p50", "p95", "p99"))

    return (f"| {run['rate']:g}/s | {run['system']} | {cells(run['pods_s'])} | "
            f"{cells(run['running_s'])} | {run['jobs_not_running']} of {run['jobs']} | "
            f"{run['controller_cpu_s_per_job']:g} | {run['event_path_cpu_s_per_job']:g} |")


def test_steady_figures_are_the_committed_steady_result() -> None:
    """docs/performance.md, "Steady arrivals": every row is bench/results/steady.json's, and
    the gap to the tuned Go operator's p99 is computed from it."""
    for run in STEADY["runs"]:
        assert steady_row(run) in PERFORMANCE, steady_row(run)
    for rate in report_steady.rates(STEADY):
        gap = report_steady.against(STEADY, rate, "ours", "go-tuned")
        assert gap is not None
        assert f"at {rate:g} per second, {gap:+g} s" in PERFORMANCE
