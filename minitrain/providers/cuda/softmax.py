"""CUDA kernels of Softmax/LogSoftmax and their gradients in both ONNX forms (cuda/softmax.cu),
registered as the CPU's are (providers/cpu/softmax.py); ops/softmax.py's axis_layout gives the
(outer, n, inner) view of the normalised axis."""
from ...ops.schema import MS_DOMAIN
from ...ops.softmax import axis_layout
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel

WARP_ELEMS = (1, 2, 4, 8, 16, 32)          # the softmax_warp<E> instantiations: rows up to 1024
ROWS_PER_BLOCK = 4                          # warps (rows) per block of the warp kernels
BLOCK_THREADS = 512                         # threads of the block-per-row kernels


def _kernels(prefix, pointers):
    warp = {e: Kernel("softmax", f"{prefix}_warp{e}", pointers + "qii") for e in WARP_ELEMS}
    return warp, Kernel("softmax", f"{prefix}_block", pointers + "qqi"), \
        Kernel("softmax", f"{prefix}_strided", pointers + "qqqi")


_FORWARD = _kernels("softmax", "PP")
_BACKWARD = _kernels("softmax_grad", "PPP")


def _launch(provider, kernels, dtype, layout, log_softmax, *arrays):
    """Run the kernel that fits the (outer, n, inner) layout on `arrays` (inputs, then output)."""
    warp, block, strided = kernels
    outer, n, inner = layout
    if inner > 1:
        strided.launch_elements(provider, dtype, outer * inner, *arrays, outer, n, inner, int(log_softmax))
    elif n <= 32 * WARP_ELEMS[-1]:
        elems = next(e for e in WARP_ELEMS if 32 * e >= n)
        blocks = (outer + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
        warp[elems].launch(provider, dtype, (blocks, 1, 1), (32 * ROWS_PER_BLOCK, 1, 1), *arrays, outer, n,
                           int(log_softmax))
    else:
        blocks = min(outer, provider.multiprocessors * 32)
        block.launch(provider, dtype, (blocks, 1, 1), (BLOCK_THREADS, 1, 1), *arrays, outer, n, int(log_softmax))


def _forward(log_softmax, coerce_2d):
    def kernel(ctx):
        x = ctx.inputs[0]
        y = ctx.provider.empty(x.shape, x.dtype)
        if x.size:
            _launch(ctx.provider, _FORWARD, x.dtype, axis_layout(x.shape, ctx.attrs["axis"], coerce_2d),
                    log_softmax, x, y)
        return {"output": y}
    return kernel


def _backward(log_softmax, coerce_2d):
    def kernel(ctx):
        dy, y = ctx.inputs[0], ctx.inputs[1]
        dx = ctx.provider.empty(dy.shape, dy.dtype)
        if dy.size:
            _launch(ctx.provider, _BACKWARD, dy.dtype, axis_layout(dy.shape, ctx.attrs["axis"], coerce_2d),
                    log_softmax, dy, y, dx)
        return {"dX": dx}
    return kernel


for _op, _log in (("Softmax", False), ("LogSoftmax", True)):
    register_kernel(_op, since=1, end=12, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_forward(_log, coerce_2d=True))
    register_kernel(_op, since=13, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(_forward(_log, coerce_2d=False))
    register_kernel(f"{_op}Grad", domain=MS_DOMAIN, provider="cuda",
                    dtypes=CUDA_FLOAT_TYPES)(_backward(_log, coerce_2d=True))
    register_kernel(f"{_op}Grad_13", domain=MS_DOMAIN, provider="cuda",
                    dtypes=CUDA_FLOAT_TYPES)(_backward(_log, coerce_2d=False))
