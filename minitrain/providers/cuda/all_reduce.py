"""CUDA kernels of the all-reduce ops (ops/all_reduce.py).

NcclAllReduce queues NCCL's all-reduce (sum) on the provider's stream, into a new tensor.
StartAllReduce takes a new flat buffer and, on the provider's collective stream
(collective_stream.py), after the work queued so far, copies its scaled inputs into it and sums
it over the ranks in place with NCCL, so that the compute queued after it overlaps both;
WaitAllReduce makes the provider's stream wait for them.  Either way a captured step records the
collective in its graph.  Outside a world StartAllReduce copies on the provider's stream, and a
world of one copies on the collective stream, the path of a larger world.
"""
from ...distributed.world import add_shutdown_hook, communicator, world
from ...ops.schema import FLOAT_TYPES, MINITRAIN_DOMAIN, MS_DOMAIN
from ...registry import register_kernel
from .collective_stream import collective_stream
from .flat_buffer import copy_scaled
from .libs.nccl import world_communicator


def _nccl(current):
    return world_communicator(current.rank, current.size, lambda raw: communicator().Bcast(raw, root=0),
                              add_shutdown_hook)


@register_kernel("NcclAllReduce", domain=MS_DOMAIN, provider="cuda", dtypes=FLOAT_TYPES)
def all_reduce(ctx):
    x, provider = ctx.inputs[0], ctx.provider
    total = provider.empty(x.shape, x.dtype)
    current = world()
    if current is None or current.size == 1:
        provider.copy_into(total, x)
    elif x.size:
        _nccl(current).all_reduce(x, total, provider.stream)
    return {"output": total}


@register_kernel("StartAllReduce", domain=MINITRAIN_DOMAIN, provider="cuda", dtypes=FLOAT_TYPES)
def start_all_reduce(ctx):
    inputs, provider, scale = ctx.inputs, ctx.provider, ctx.attrs["scale"]
    flat = provider.empty((sum(x.size for x in inputs),), ctx.dtype)
    current = world()
    if current is None:
        copy_scaled(provider, flat, inputs, scale, provider.stream)
    elif flat.size:
        nccl = _nccl(current) if current.size > 1 else None

        def enqueue(stream):
            copy_scaled(provider, flat, inputs, scale, stream)
            if nccl is not None:
                nccl.all_reduce(flat, flat, stream)
        collective_stream(provider).start(enqueue, flat, holding=inputs)
    return {"pending": flat}


@register_kernel("WaitAllReduce", domain=MINITRAIN_DOMAIN, provider="cuda", dtypes=FLOAT_TYPES)
def wait_all_reduce(ctx):
    pending, provider = ctx.inputs[0], ctx.provider
    collective_stream(provider).wait(pending)
    return {"output": pending}
