"""``python -m functions <command>``: one entry point for the container and for users (the
local cluster and development stack are ``python -m devstack``, a distribution of their own).

Each command lives in its own module exposing ``add_parser(subparsers)``, which registers the
command and sets ``handler`` (``args -> exit code``). Only the module of the command being run
is imported, so ``serve`` (the container's command, on the cold-start path) does not pay for
the others. A command whose module is not in this installation is simply not offered.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

import functions
from functions.runtime import logs

# command -> (module, name of its ``add_parser`` function)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("functions.runtime.serve", "add_parser"),
    "jobs": ("functions.api.cli", "add_parser"),
    "doctor": ("functions.doctor.cli", "add_parser"),
}


def program_name() -> str:
    """How the user called us: a console script by its own name, a kubectl plugin as kubectl
    names it (``kubectl-training`` is ``kubectl training``), else ``python -m functions``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name.startswith("kubectl-"):  # kubectl's plugin naming: dashes are spaces
        return "kubectl " + name.removeprefix("kubectl-").replace("-", " ").replace("_", "-")
    return "python -m functions" if name in ("", "__main__.py", "-c") else name


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name(),
        description="Kubeflow training controllers as Knative functions")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {functions.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (module_name, register) in COMMANDS.items():
        if wanted in COMMANDS and name != wanted:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # that command is not part of this installation
            raise
        getattr(module, register)(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser, argv)


def run(build: Callable[[Sequence[str]], argparse.ArgumentParser],
        argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with the parser ``build`` makes for it, configure logging (``-v``,
    ``LOG_LEVEL``, ``LOG_FORMAT``) and run the chosen command's handler; the local stack's
    ``python -m devstack`` runs its commands the same way."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build(args_list)
    args = parser.parse_args(args_list)
    try:
        logs.configure(verbose=args.verbose)
    except logs.SettingError as exc:
        parser.error(str(exc))
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
