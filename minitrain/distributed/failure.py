"""Ending the whole world when one rank fails.

A rank that dies alone leaves the others waiting in their next collective forever.  init()
replaces `sys.excepthook` so that an uncaught exception on any rank prints its traceback, tagged
with the rank, and then calls MPI Abort, which makes the launcher end every rank: the run stops
in bounded time with that rank's error on stderr, never a hang.
"""
from __future__ import annotations

import sys
import traceback

ABORT_CODE = 1


def abort_on_uncaught_exception(rank, comm):
    """Install the excepthook: print the traceback as `[rank R] ...` lines, then abort `comm`."""
    previous = sys.excepthook

    def abort(kind, error, trace):
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, error, trace)
        else:
            text = "".join(traceback.format_exception(kind, error, trace))
            sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
            sys.stderr.write(f"[rank {rank}] aborting every rank of the world (MPI Abort)\n")
        sys.stderr.flush()
        sys.stdout.flush()
        comm.Abort(ABORT_CODE)

    sys.excepthook = abort
