"""The exit codes of the command-line clients (``jobs``, its ``odh-training-jobs`` and
``kubectl-training`` scripts, and ``doctor``), one table for all of them.

A script tells what happened from the code alone: the operation did not succeed (1) is not
a typo in the command (2), a wait that ran out (3) or a cluster that cannot be reached at all
(4), which are retried, fixed or escalated differently. Every failure is one line on stderr
that says what to do; :class:`CliError` carries it and its code to the command's edge.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1       # refused, not found, invalid, a watched job Failed, a doctor check failed
    USAGE = 2        # the command line is wrong (argparse's own code)
    TIMEOUT = 3      # ``watch --timeout`` ran out before the jobs finished
    UNREACHABLE = 4  # no kubeconfig, connection refused, TLS failure, cluster unavailable


EPILOG = """exit codes:
  0  success
  1  the operation failed: refused (forbidden, invalid), not found, a watched job Failed,
     a doctor check failed
  2  usage error: the command line is wrong
  3  timed out (watch --timeout)
  4  cannot reach the cluster or the training API: no kubeconfig, connection refused,
     TLS failure, the cluster unavailable"""


class CliError(Exception):
    """A failure to report as one line (``message``, which says what to do) and ``code``."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NotFound(CliError):
    """The job (or what it needs) does not exist, or the user may not see it."""

    def __init__(self, message: str) -> None:
        super().__init__(ExitCode.FAILED, message)
