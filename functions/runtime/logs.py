"""How the product logs, set by the environment as a container is configured:

* ``LOG_LEVEL``: ``debug``, ``info`` (the default), ``warning`` or ``error``; ``-v`` on the
  command line means ``debug``;
* ``LOG_FORMAT``: ``text`` (the default: time, level, logger, message) or ``json``, one JSON
  object per line (``time`` in UTC, ``level``, ``logger``, ``message``, and ``exception`` with
  the traceback when there is one), for a cluster's log collector.

Our loggers and gunicorn's (its master and workers) log alike: gunicorn is given the level and,
for JSON, a logger class whose handlers format as ours do. Importing this module costs no
third-party import (the command-line tools configure logging with it too).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class SettingError(ValueError):
    """``LOG_LEVEL`` or ``LOG_FORMAT`` names no value this module knows."""


def level_name(environ: Mapping[str, str] = os.environ, *, verbose: bool = False) -> str:
    if verbose:
        return "debug"
    name = (environ.get("LOG_LEVEL") or "info").strip().lower()
    if name not in LEVELS:
        raise SettingError(f"LOG_LEVEL={name!r}: expected one of {', '.join(LEVELS)}")
    return name


def format_name(environ: Mapping[str, str] = os.environ) -> str:
    name = (environ.get("LOG_FORMAT") or "text").strip().lower()
    if name not in FORMATS:
        raise SettingError(f"LOG_FORMAT={name!r}: expected one of {', '.join(FORMATS)}")
    return name


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def formatter(format_: str) -> logging.Formatter:
    return JsonFormatter() if format_ == "json" else logging.Formatter(TEXT_FORMAT)


def configure(*, verbose: bool = False, environ: Mapping[str, str] = os.environ) -> None:
    """Set up the root logger from the environment (raises :class:`SettingError`)."""
    level, format_ = LEVELS[level_name(environ, verbose=verbose)], format_name(environ)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(format_))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def gunicorn_settings(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The gunicorn options that make it log as the product does (its logger class for JSON
    is :class:`functions.runtime.serve.JsonGunicornLogger`)."""
    options: dict[str, Any] = {"loglevel": level_name(environ)}
    if format_name(environ) == "json":
        options["logger_class"] = "functions.runtime.serve.JsonGunicornLogger"
    return options
