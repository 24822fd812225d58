"""How a pass's writes are carried out in a process: together, on threads the process keeps."""

from __future__ import annotations

import os
import threading

import pytest

from functions.jobs import writes


def test_a_passes_writes_go_out_together_on_the_process_threads() -> None:
    barrier = threading.Barrier(4, timeout=5)  # passes only if all four run at once

    def act(obj: dict[str, object]) -> str:
        barrier.wait()
        return threading.current_thread().name

    first = writes._parallel([{"n": n} for n in range(4)], act)
    alive = {thread.name for thread in threading.enumerate()}
    again = writes._parallel([{"n": n} for n in range(4)], act)
    assert all(name.startswith("job-writes") for name in first + again)
    assert set(again) <= alive  # the second pass started no threads
    assert writes._writers() is writes._writers()


def test_a_forked_process_makes_threads_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = writes._writers()
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert writes._writers() is not parent


def test_a_single_write_runs_in_the_pass_thread() -> None:
    assert writes._parallel([{}], lambda _: threading.current_thread().name) == [
        threading.current_thread().name]
