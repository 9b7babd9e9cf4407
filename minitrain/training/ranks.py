"""Ranks: the processes one `fit` runs on, the MPI world of a data-parallel session or this
process alone, and the few exchanges fit makes between them outside the step graph.

Everything here is collective: every rank calls it at the same point, so that no rank waits
forever in a collective another rank never reaches.  What only rank 0 does (the run folder, the
checkpoint files) runs through `on_main`, which hands rank 0's result, or the exception it
raised, to every rank: an error there stops every rank alike, with the same message.
"""
from __future__ import annotations

import numpy as np

from .. import distributed
from .. import random as mt_random


class Ranks:
    """The world of `session` when it trains data-parallel, else a world of this process."""

    def __init__(self, session):
        self.world = session.world
        self.rank = self.world.rank if self.world else 0
        self.size = self.world.size if self.world else 1
        self.main = self.rank == 0

    def on_main(self, action, *args, **kwargs):
        """action(*args, **kwargs) run on rank 0 alone; its result on every rank, or the
        exception it raised raised on every rank."""
        if self.world is None:
            return action(*args, **kwargs)
        outcome = None
        if self.main:
            try:
                outcome = (True, action(*args, **kwargs))
            except Exception as error:         # re-raised below, on every rank
                outcome = (False, error)
        succeeded, value = distributed.broadcast_object(outcome)
        if not succeeded:
            raise value
        return value

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank."""
        return obj if self.world is None else distributed.broadcast_object(obj)

    def sum(self, values):
        """The sums over ranks of a list of numbers, as float64."""
        totals = np.asarray(values, dtype=np.float64)
        return totals if self.world is None else distributed.allreduce_sum(totals)

    def barrier(self):
        if self.world is not None:
            distributed.barrier()

    def random_states(self):
        """Every rank's random generator state, in rank order, for a checkpoint (None outside a
        world: the checkpoint's own state is this process's)."""
        return distributed.allgather_object(mt_random.get_state()) if self.world else None

    def restore_random_streams(self, states):
        """After a checkpoint set rank 0's generator state on every rank: each rank takes back
        its own state when the checkpoint comes from a world of this size (`states`, from
        random_states), so that the run goes on bitwise; otherwise each draws a stream of its
        own, as a data-parallel session does at start (the next draw + the rank): Dropout masks
        must differ between ranks."""
        if self.world is None:
            return
        if states is not None and len(states) == self.size:
            mt_random.set_state(states[self.rank])
        else:
            mt_random.seed(int(mt_random.generator().integers(0, 2 ** 62)) + self.rank)
