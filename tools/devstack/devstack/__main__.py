"""``python -m devstack <command>``: the local cluster and development stack.

Each command lives in its own module exposing ``add_parser(subparsers)`` (as the product's
``python -m functions`` does), and only the module of the command being run is imported.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from functions.__main__ import run

# command -> (module, name of its ``add_parser`` function)
COMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("devstack.cli", "add_parser"),
    "cluster": ("devstack.cluster.cli", "add_parser"),
    "router": ("devstack.broker", "add_parser"),
    "record": ("devstack.recording", "add_record_parser"),
    "replay": ("devstack.recording", "add_replay_parser"),
}


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devstack",
        description="the ODH training functions on a local cluster, for development and tests")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (module_name, register) in COMMANDS.items():
        if wanted in COMMANDS and name != wanted:
            continue
        getattr(importlib.import_module(module_name), register)(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser, argv)  # logging from -v, LOG_LEVEL and LOG_FORMAT, as the product's


if __name__ == "__main__":
    sys.exit(main())
