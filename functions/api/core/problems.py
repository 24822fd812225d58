"""Problem documents (RFC 9457) and the field-level errors of an invalid request.

Every error the API answers is a :class:`Problem`; a request that fails validation lists each
offending field by its dotted JSON path (``resources.gpus``, ``env.1BAD``), so a platform can
point its user at the right input.
"""

from __future__ import annotations

import base64
import binascii
import json
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError

from functions.api.core.models import FieldError, Problem

PROBLEM_JSON = "application/problem+json"


class ProblemError(Exception):
    """Raised to answer with ``body`` (and extra response ``headers``)."""

    def __init__(self, body: Problem, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.detail)
        self.body = body
        self.headers = headers or {}


def problem(status: int, detail: str, errors: list[FieldError] | None = None,
            title: str | None = None) -> Problem:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return Problem(title=title or phrase, status=status, detail=detail, errors=errors or [])


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "body"


def field_errors(exc: ValidationError) -> list[FieldError]:
    """One :class:`FieldError` per pydantic error, named by its dotted location."""
    out: list[FieldError] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error.get("loc") or ())
        message = str(error.get("msg") or "invalid")
        if error.get("type") == "extra_forbidden":
            message = "unknown field"
        out.append(FieldError(field=_path(loc), message=message, type=str(error.get("type"))))
    return out


def invalid_request(exc: ValidationError) -> Problem:
    errors = field_errors(exc)
    names = ", ".join(dict.fromkeys(e.field for e in errors))
    return problem(422, f"invalid request: {names}", errors)


def single_field(status: int, field: str, message: str) -> Problem:
    return problem(status, f"{field}: {message}", [FieldError(field=field, message=message)])


# -- list continuation ---------------------------------------------------------------------------

def encode_continue(kind_index: int, token: str | None) -> str:
    raw = json.dumps({"k": kind_index, "t": token or ""}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(value: str, kinds: int) -> tuple[int, str | None]:
    """(index of the kind to list next, the API server's token in it); ValueError if bad."""
    try:
        padded = value + "=" * (-len(value) % 4)
        data: Any = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise ValueError("not a continue token of this API") from exc
    if not isinstance(data, dict):
        raise ValueError("not a continue token of this API")
    index, token = data.get("k"), data.get("t")
    if not isinstance(index, int) or not 0 <= index < kinds or not isinstance(token, str):
        raise ValueError("not a continue token of this API")
    return index, token or None
