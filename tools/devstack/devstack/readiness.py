"""Waiting for a local process's HTTP readiness: the local stack's functions, named with what
they last answered and the end of their log when they do not get ready."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from devstack.cluster.runner import Component


def wait_ready(component: Component, url: str, timeout: float) -> None:
    """Until ``url`` answers 200; a process that exits, or stays unready, is named with its
    last answer and the end of its log."""
    deadline, answer = time.monotonic() + timeout, "none"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - local URL
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            answer = f"{exc.code} {exc.read(200).decode(errors='replace').strip()}"
        except OSError as exc:
            answer = str(exc)
        code = component.exited()
        if code is not None or time.monotonic() > deadline:
            why = f"exited ({code})" if code is not None else f"not ready after {timeout:g} s"
            raise TimeoutError(f"{component.name} at {url}: {why}; last answer: {answer}; "
                               f"its log ends:\n{component.tail()}")
        time.sleep(0.05)
