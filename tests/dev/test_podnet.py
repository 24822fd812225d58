"""The local pod network's event loop (``functions.dev.podnet.run_loop``)."""

from __future__ import annotations

import asyncio

import uvloop

from functions.dev.podnet import run_loop


async def loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_the_relays_run_on_uvloop_when_it_is_installed() -> None:
    """The dev extra installs uvloop: the relays and the cluster network run on its loop."""
    assert run_loop(loop_type()) is uvloop.Loop
