"""BatchNormalization's mixed element types on the CPU.

ONNX lets scale and B (T1) and the statistics (T2) have float types other than X's (T), which
is how mixed precision runs the op: 16-bit data, float32 parameters and statistics.  The CPU
kernels compute in X's type, float32 or float64 (float64 stands in for a 16-bit type when the
autocast pass is checked on the CPU), so `in_data_type` gives a kernel its per-channel inputs
in X's type and hands each per-channel output back in the type of the input it belongs with.
"""
import dataclasses
import functools


def in_data_type(output_types):
    """Decorator for a BatchNormalization CPU kernel: its inputs reach it in X's element type
    (ctx.dtype), and each output named in `output_types` (output name -> index of the input
    whose type it has) leaves in that input's type."""
    def wrap(kernel):
        @functools.wraps(kernel)
        def run(ctx):
            dtype = ctx.dtype
            for a in ctx.inputs:
                if a is not None and a.dtype != dtype:
                    break
            else:       # every input of X's type: the common case, checked without a list
                return kernel(ctx)
            dtypes = [None if a is None else a.dtype for a in ctx.inputs]
            inputs = [None if a is None else a.astype(ctx.dtype, copy=False) for a in ctx.inputs]
            out = kernel(dataclasses.replace(ctx, inputs=inputs))
            return {name: value.astype(dtypes[output_types[name]], copy=False) if name in output_types else value
                    for name, value in out.items()}
        return run
    return wrap
