"""CPU kernels of the all-reduce ops (ops/all_reduce.py): MPI's Allreduce (sum) over the world,
into a new array (outside a world: a copy of the input).  StartAllReduce sums its scaled, flat
concatenation at once, in the order the plan starts the buckets, and WaitAllReduce passes the
sum on."""
import numpy as np

from ...distributed.world import communicator, world
from ...ops.schema import FLOAT_TYPES, MINITRAIN_DOMAIN, MS_DOMAIN
from ...registry import register_kernel
from .flat_buffer import scaled_concat


def _sum_over_ranks(x):
    total = np.empty_like(x)
    if world() is None:
        np.copyto(total, x)
    else:
        communicator().Allreduce(x, total)      # MPI_SUM
    return total


@register_kernel("NcclAllReduce", domain=MS_DOMAIN, dtypes=FLOAT_TYPES)
def all_reduce(ctx):
    return {"output": _sum_over_ranks(ctx.inputs[0])}


@register_kernel("StartAllReduce", domain=MINITRAIN_DOMAIN, dtypes=FLOAT_TYPES)
def start_all_reduce(ctx):
    flat = scaled_concat(ctx.inputs, ctx.dtype, ctx.attrs["scale"])
    return {"pending": flat if world() is None else _sum_over_ranks(flat)}


@register_kernel("WaitAllReduce", domain=MINITRAIN_DOMAIN, dtypes=FLOAT_TYPES)
def wait_all_reduce(ctx):
    return {"output": ctx.inputs[0]}
