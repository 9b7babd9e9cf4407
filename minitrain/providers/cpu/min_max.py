"""CPU kernels of Max and Min (NumPy): the inputs folded pairwise, broadcasting as they go; a
NaN in any input gives NaN there, as np.maximum and np.minimum propagate it."""
import functools

import numpy as np

from ...registry import register_kernel


def _fold(ufunc, output):
    def kernel(ctx):
        return {output: np.asarray(functools.reduce(ufunc, ctx.inputs))}
    return kernel


register_kernel("Max", since=8)(_fold(np.maximum, "max"))
register_kernel("Min", since=8)(_fold(np.minimum, "min"))
