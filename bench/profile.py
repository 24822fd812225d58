"""Where the functions spend their Python time under the burst: ``python -m bench.profile``.

One run of the burst (``bench.burst``, system ``ours``) with ``py-spy`` attached to every
function process and to the process that hosts the Broker emulation. ``py-spy --gil`` samples
only the thread that holds the GIL, so the samples are the Python CPU time of each process
(native work that releases the GIL, such as TLS and socket I/O, is not counted). Each sample
is put in one category, decided by the frame nearest the leaf that names one
(:func:`categorise`), and the report gives each function's share per category and its top
frames. The same run takes Go CPU profiles of the API server and of the receive adapter, and a
second run, with the tuned Go operator, one of its API server (:mod:`bench.go_profile`): they
say whether the API server works harder for ours than for the operator it replaces, and what
the adapter does with each change. A second ``py-spy`` per function samples the wall clock of
its request threads (:mod:`bench.profile_wall`): what a delivery waits for. A third run profiles
the functions alike on the real Knative data plane (``ours-knative``). The figures are a
profile of one run each, not a benchmark: they say where the time goes, the burst benchmark
says how much there is.

``python -m bench.profile [--jobs N] [--rate HZ] [--go-seconds S] [--no-knative] [--out DIR]``
writes ``profile.json`` and ``profile.md`` to ``bench/results/`` (or ``DIR``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bench import go_profile, profile_wall
from bench.burst import one_run
from bench.burst_systems import Started
from devstack.cluster.binaries import ensure_bin_dir

RESULTS = Path(__file__).parent / "results"

# (category, substrings of a frame's file); the first category whose file appears nearest
# the leaf wins, so an API request made by a handler counts as an API request.
CATEGORIES: go_profile.Categories = (
    ("events recorded (Event objects)", ("functions/runtime/recorder.py",)),
    ("API client (HTTP, JSON)", ("functions/kube/client.py", "functions/kube/transport.py",
                                 "functions/kube/pools.py",
                                 "urllib3/", "http/client.py", "ssl.py", "orjson")),
    ("watch cache (decode, index)", ("functions/kube/cache.py", "functions/kube/store.py")),
    ("handlers (read, plan, status)", ("functions/jobs/", "functions/trainer/",
                                       "functions/core/")),
    ("HTTP serving (gunicorn, WSGI)", ("functions/runtime/worker.py", "gunicorn/", "flask/",
                                       "werkzeug/")),
    ("runtime (route, coalesce, answer)", ("functions/runtime/",)),
    ("logging and metrics", ("logging/", "prometheus_client/")),
)
OTHER = go_profile.OTHER
_LINE = re.compile(r":\d+\)$")


def categorise(frames: Iterable[str]) -> str:
    """The category of one sample, ``frames`` from the root to the leaf (py-spy's raw
    format: ``function (file:line)``)."""
    return go_profile.categorise(reversed(list(frames)), CATEGORIES)


def parse_raw(text: str) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output: one ``frame;frame;... count`` line per stack."""
    stacks: list[tuple[list[str], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]], rate: float, top: int = 12) -> dict[str, Any]:
    """Seconds and shares per category, and the ``top`` frames by inclusive samples."""
    total = sum(n for _, n in stacks)
    by_category: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        by_category[categorise(frames)] += count
        for frame in {_LINE.sub(")", f) for f in frames}:
            inclusive[frame] += count
    return {
        "seconds": round(total / rate, 2),
        "categories": {c: {"seconds": round(n / rate, 2), "share": round(n / total, 3)}
                       for c, n in by_category.most_common()} if total else {},
        "top_frames": [{"frame": f, "share": round(n / total, 3)}
                       for f, n in inclusive.most_common(top)] if total else [],
    }


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _name(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    words = [a.decode() for a in args if a]
    return words[words.index("serve") + 1] if "serve" in words else "bench process"


# Sampling every thread costs py-spy a stack walk per thread: a low rate keeps the run close to
# an unprofiled one, and a burst still gives hundreds of samples per request thread.
WALL_RATE = 10.0


class Profilers:
    """``py-spy record`` on each function's worker processes (and on this process when it
    hosts the Broker emulation): ``--gil`` for the Python CPU, and ``--idle`` on the functions
    for the wall clock of their deliveries (:mod:`bench.profile_wall`)."""

    def __init__(self, py_spy: str, rate: float, work: Path, *, emulated: bool = True,
                 wall_rate: float = WALL_RATE) -> None:
        self.py_spy, self.rate, self.work, self.emulated = py_spy, rate, work, emulated
        self.wall_rate = wall_rate
        work.mkdir(parents=True, exist_ok=True)
        self.running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        self.walls: list[tuple[str, Path, subprocess.Popen[bytes]]] = []

    def attach(self, started: Started) -> Callable[[], None]:
        import os
        targets = [(f"{_name(master)}", worker) for master in started.controller_pids
                   for worker in _children(master) or [master]]
        for name, pid in targets:
            self.walls.append((name, *self._record(pid, "wall", "--idle", self.wall_rate)))
        if self.emulated:
            targets.append(("bench process (create loop, Broker emulation)", os.getpid()))
        for name, pid in targets:
            self.running.append((name, *self._record(pid, "gil", "--gil", self.rate)))
        return self.stop

    def _record(self, pid: int, what: str, mode: str,
                rate: float) -> tuple[Path, subprocess.Popen[bytes]]:
        out = self.work / f"{pid}.{what}.raw"
        command = [self.py_spy, "record", mode, "--nonblocking", "--format", "raw",
                   "--rate", str(int(rate)), "--output", str(out), "--pid", str(pid)]
        return out, subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        every = self.running + self.walls
        for _, _, process in every:
            process.send_signal(2)  # SIGINT: py-spy writes its output and exits
        for _, _, process in every:
            process.wait(timeout=60)

    def results(self) -> dict[str, Any]:
        return {name: summarise(stacks, self.rate)
                for name, stacks in sorted(_merged(self.running).items()) if stacks}

    def wall(self) -> dict[str, Any]:
        found = {name: profile_wall.summarise(stacks, self.wall_rate)
                 for name, stacks in sorted(_merged(self.walls).items())}
        return {name: wall for name, wall in found.items() if wall["seconds"]}


def _merged(taken: Iterable[tuple[str, Path, Any]]) -> dict[str, list[tuple[list[str], int]]]:
    """The samples of each name (a function's worker processes together; none for a process
    that was never sampled busy, such as the dead-letter sink)."""
    merged: dict[str, list[tuple[list[str], int]]] = {}
    for name, out, _ in taken:
        if out.exists():
            merged.setdefault(name, []).extend(parse_raw(out.read_text()))
    return merged


def run(jobs: int = 200, rate: float = 100.0, go_seconds: int = 40,
        knative: bool = True) -> dict[str, Any]:
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or \
        shutil.which("py-spy")
    if py_spy is None:
        raise RuntimeError("py-spy is not installed (pip install -e .[dev])")
    bin_dir = ensure_bin_dir(("training-operator",))
    go = go_profile.go_tool()
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        work = Path(tmp)
        profilers = Profilers(py_spy, rate, work / "ours")
        go_profiles = GoProfiles(work, go_seconds, go is not None)

        def attach(started: Started) -> Callable[[], None]:
            go_profiles.attach("ours", started)
            stop = profilers.attach(started)

            def detach() -> None:
                stop()
                go_profiles.wait()
            return detach

        burst = one_run("ours", jobs, bin_dir, attach=attach,
                        adapter_env={"K_OBSERVABILITY_CONFIG": go_profile.ADAPTER_PROFILING})
        processes, wall = profilers.results(), profilers.wall()
        if go is not None:
            compared = one_run(GO_SYSTEM, jobs, bin_dir,
                               attach=lambda started: go_profiles.attach(GO_SYSTEM, started))
        go_results = go_profiles.results(go) if go is not None else {
            "missing": "no `go` command to read the Go profiles with"}
        on_knative = _knative(py_spy, rate, work / KNATIVE_SYSTEM, jobs, bin_dir) \
            if knative else None
    result = {"jobs": jobs, "rate_hz": rate, "burst": _kept(burst),
              "processes": processes, "wall": wall, "go": go_results,
              "go_seconds": go_seconds}
    if go is not None:
        result["go_burst"] = _kept(compared)
    if on_knative is not None:
        result["knative"] = on_knative
    return result


KNATIVE_SYSTEM = "ours-knative"
_KEPT = ("created_s", "running_s", "controller_cpu_s_at_created", "controller_cpu_s_at_end",
         "event_path_cpu_s_at_end", "apiserver_cpu_s_at_end", "deliveries", "dead_letters")


def _kept(burst: Mapping[str, Any]) -> dict[str, Any]:
    return {k: burst.get(k) for k in _KEPT}


def _knative(py_spy: str, rate: float, work: Path, jobs: int, bin_dir: Path) -> dict[str, Any]:
    """The functions profiled the same way on the real Knative data plane (their Python alone:
    Knative's containers are Go, their CPU is in the burst benchmark's event-path parts)."""
    profilers = Profilers(py_spy, rate, work, emulated=False)
    burst = one_run(KNATIVE_SYSTEM, jobs, bin_dir, attach=profilers.attach)
    return {"burst": _kept(burst), "processes": profilers.results(), "wall": profilers.wall()}


GO_SYSTEM = "go-tuned"


class GoProfiles:
    """The Go CPU profiles of one burst: the API server's under each system, and the objects
    adapter's under ours (:mod:`bench.go_profile`), each over ``seconds`` from the burst's
    start (long enough to cover it, so the API server's totals compare)."""

    ADAPTER = "odh-training-objects"

    def __init__(self, work: Path, seconds: int, enabled: bool) -> None:
        self.work, self.seconds, self.enabled = work, seconds, enabled
        # each profile with the categories its samples are put in
        self.taken: dict[str, tuple[go_profile.GoProfile, go_profile.Categories]] = {}
        self._pending: list[go_profile.GoProfile] = []

    def attach(self, system: str, started: Started) -> Callable[[], None]:
        if not self.enabled:
            return lambda: None
        admin = started.cluster.client(timeout=self.seconds + 60.0)
        self._take(f"API server under {system}", go_profile.from_apiserver(admin),
                   go_profile.APISERVER_CATEGORIES)
        for pid in started.event_path_pids:
            environment = go_profile.process_environment(pid)
            if environment.get("NAME") == self.ADAPTER and environment.get("PROFILING_PORT"):
                self._take(f"receive adapter {self.ADAPTER} under {system}",
                           go_profile.from_port(int(environment["PROFILING_PORT"])),
                           go_profile.ADAPTER_CATEGORIES)
        return self.wait

    def _take(self, name: str, fetch: Callable[[int], bytes],
              categories: go_profile.Categories) -> None:
        profile = go_profile.GoProfile(fetch, self.seconds, self.work / f"{len(self.taken)}.pb")
        self.taken[name] = (profile, categories)
        self._pending.append(profile)

    def wait(self) -> None:
        """Wait for the profiles still being taken (a burst shorter than the window)."""
        for profile in self._pending:
            profile.wait(self.seconds + 90.0)
        self._pending.clear()

    def results(self, go: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, (profile, categories) in self.taken.items():
            path = profile.wait(0)
            if path is None:
                found[name] = {"missing": profile.error}
                continue
            found[name] = go_profile.summarise(
                go_profile.parse_traces(go_profile.traces(go, path)), categories)
        return found


def markdown(result: Mapping[str, Any]) -> str:
    burst = result["burst"]
    lines = [f"# Profile of the functions under a {result['jobs']}-job burst", "",
             f"One run, `py-spy --gil` at {result['rate_hz']:.0f} Hz: the Python CPU time of "
             "each process, by category (the frame nearest the leaf decides). The run: T "
             f"{burst['created_s']} s, all Running {burst['running_s']} s, functions' CPU "
             f"{burst['controller_cpu_s_at_end']} s, {burst['deliveries']} deliveries.", ""]
    lines += _processes(result["processes"], "")
    knative = result.get("knative")
    if knative:
        kburst = knative["burst"]
        lines += [f"# The same on the real Knative data plane ({KNATIVE_SYSTEM})", "",
                  f"A third run, the functions profiled alike. The run: T {kburst['created_s']}"
                  f" s, all Running {kburst['running_s']} s, functions' CPU "
                  f"{kburst['controller_cpu_s_at_end']} s.", "",
                  *_processes(knative["processes"], f" ({KNATIVE_SYSTEM})")]
    walls = {"ours": result.get("wall"), KNATIVE_SYSTEM: (knative or {}).get("wall")}
    return "\n".join(lines + profile_wall.markdown(walls) + _go_markdown(result))


def _processes(processes: Mapping[str, Any], suffix: str) -> list[str]:
    lines: list[str] = []
    for name, found in processes.items():
        lines += [f"## {name}{suffix}: {found['seconds']} s with the GIL", "",
                  *go_profile.category_table(found["categories"])]
        lines += ["", "Top frames (inclusive):", ""]
        lines += [f"- {f['share']:.0%} `{f['frame']}`" for f in found["top_frames"]]
        lines.append("")
    return lines


def _go_markdown(result: Mapping[str, Any]) -> list[str]:
    go = result.get("go") or {}
    if "missing" in go:
        return ["## Go processes", "", f"Not profiled: {go['missing']}.", ""]
    compared = result.get("go_burst") or {}
    lines = ["## Go processes", "",
             "CPU profiles (`go tool pprof`) over the same window from each burst's start: "
             "the API server under ours and, in a second run on a fresh cluster, under the "
             f"tuned Go operator (T {compared.get('created_s')} s), and the receive adapter "
             "that sends the jobs' and pods' changes. A sample's category is decided by the "
             "frame nearest the leaf that names one.", ""]
    for name, found in go.items():
        if "missing" in found:
            lines += [f"### {name}", "", f"Not profiled: {found['missing']}.", ""]
            continue
        lines += [f"### {name}: {found['seconds']} s", "",
                  *go_profile.category_table(found["categories"]), ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--go-seconds", type=int, default=40,
                        help="the window of the Go CPU profiles, from the burst's start")
    parser.add_argument("--no-knative", dest="knative", action="store_false",
                        help="skip the run on the real Knative data plane")
    args = parser.parse_args(argv)
    result = run(args.jobs, args.rate, args.go_seconds, args.knative)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "profile.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
