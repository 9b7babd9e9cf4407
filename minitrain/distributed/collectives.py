"""Host collectives over the MPI world, for what minitrain exchanges outside the step graph:
objects (settings, digests), arrays (parameters at start, BatchNorm statistics) and metrics.

Outside a world (init() not called) every collective is the identity of a world of one, so code
written for data parallelism runs unchanged in one process.
"""
from __future__ import annotations

import numbers

import numpy as np

from .world import communicator, world


def broadcast_object(obj, root=0):
    """`obj` of rank `root` on every rank (pickled)."""
    if world() is None:
        return obj
    return communicator().bcast(obj, root=root)


def allgather_object(obj):
    """The list of every rank's `obj`, in rank order."""
    if world() is None:
        return [obj]
    return communicator().allgather(obj)


def broadcast_array(array, root=0):
    """Rank `root`'s array on every rank.  Written in place into `array` where it is a
    writable C-contiguous array of the root's shape and dtype (and returned); otherwise a new
    array is returned (other ranks may pass None)."""
    if world() is None:
        return array
    comm = communicator()
    meta = None
    if comm.Get_rank() == root:
        array = np.asarray(array)
        meta = (array.shape, array.dtype.str)
    shape, dtype = comm.bcast(meta, root=root)
    fits = (isinstance(array, np.ndarray) and array.shape == shape and array.dtype == np.dtype(dtype)
            and array.flags.c_contiguous and array.flags.writeable)
    target = array if fits else np.empty(shape, dtype)
    if comm.Get_rank() == root and not fits:
        target[...] = array
    comm.Bcast(target, root=root)
    return target


def allreduce_sum(value):
    """The sum over ranks of a NumPy array (a new array) or a number (a number of its type)."""
    return _allreduce(value, mean=False)


def allreduce_mean(value):
    """The mean over ranks of a NumPy array (a new array of its float dtype) or a number (a
    float)."""
    return _allreduce(value, mean=True)


def _allreduce(value, mean):
    array = np.ascontiguousarray(value)
    if mean and not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    total = array.copy()
    if world() is not None:
        communicator().Allreduce(array, total)      # MPI_SUM
        if mean:
            total /= world().size
    if isinstance(value, np.generic):
        return total[()]
    return total.item() if isinstance(value, numbers.Number) else total
