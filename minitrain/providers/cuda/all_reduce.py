"""CUDA kernels of the all-reduce ops (ops/all_reduce.py), each into a new tensor.

NcclAllReduce queues NCCL's all-reduce (sum) on the provider's stream.  StartAllReduce queues it
on the provider's collective stream (collective_stream.py), after the work queued so far, so
that the compute queued after it overlaps it; WaitAllReduce makes the provider's stream wait for
it.  Either way a captured step records the collective in its graph.  Outside a world the sum is
a copy on the provider's stream; a world of one copies on the collective stream, the path of a
larger world.
"""
import pycuda.driver as driver

from ...distributed.world import add_shutdown_hook, communicator, world
from ...ops.schema import FLOAT_TYPES, MINITRAIN_DOMAIN, MS_DOMAIN
from ...registry import register_kernel
from .collective_stream import collective_stream
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
    x, provider = ctx.inputs[0], ctx.provider
    pending = provider.empty(x.shape, x.dtype)
    current = world()
    if current is None:
        provider.copy_into(pending, x)
    elif x.size:
        if current.size == 1:
            def enqueue(stream):
                driver.memcpy_dtod_async(pending.gpudata, x.gpudata, x.nbytes, stream)
        else:
            nccl = _nccl(current)

            def enqueue(stream):
                nccl.all_reduce(x, pending, stream)
        collective_stream(provider).start(enqueue, pending, holding=(x,))
    return {"pending": pending}


@register_kernel("WaitAllReduce", domain=MINITRAIN_DOMAIN, provider="cuda", dtypes=FLOAT_TYPES)
def wait_all_reduce(ctx):
    pending, provider = ctx.inputs[0], ctx.provider
    collective_stream(provider).wait(pending)
    return {"output": pending}
