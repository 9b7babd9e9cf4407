"""MemcpyFromHost and MemcpyToHost on the CUDA provider: the copies the scheduler inserts
where a value crosses between host memory and the device (ONNX Runtime's kernels of the same
names).  MemcpyToHost waits for the stream, since a host consumer reads the result next."""
from ...ops.memcpy import ANY_TYPES
from ...registry import register_kernel


@register_kernel("MemcpyFromHost", provider="cuda", dtypes=ANY_TYPES, host_inputs=(0,))
def memcpy_from_host(ctx):
    return {"Y": ctx.provider.from_numpy(ctx.inputs[0])}


@register_kernel("MemcpyToHost", provider="cuda", dtypes=ANY_TYPES, host_outputs=("Y",))
def memcpy_to_host(ctx):
    return {"Y": ctx.provider.to_numpy(ctx.inputs[0])}
