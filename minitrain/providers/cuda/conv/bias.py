"""The bias of the CUDA convolutions: adding it to an output, and its gradient.

Both walk the output as rows (sample, channel) of one plane each, cut into chunks of CHUNK
elements, one block per chunk, so no kernel divides per element and every shape fills the
device (LeNet's first layer has 6 channels: one block per channel left 126 of 132 SMs idle).
The gradient sums each chunk into a partial (float32, float64 for float64 data) and then each
channel's partials in a fixed order (sum_slices, which the tiled weight gradient uses too):
deterministic, no atomics.
"""
from __future__ import annotations

import numpy as np

from ..compiler import Kernel
from ..launch import BLOCK, MAX_GRID_X, WARPS_PER_BLOCK

CHUNK = 4096

_add_bias = Kernel("conv", "add_bias", "PPqqqq")
_partial = Kernel("conv", "bias_grad_partial", "PPqqq")
_sum_slices = Kernel("conv", "sum_slices", "PPqq")


def _rows(value, channels):
    rows = value.shape[0] * channels
    plane = value.size // rows if rows else 0
    return rows, plane, -(-plane // CHUNK) if plane else 0


def add_bias(provider, y, bias, channels):
    """y (N, channels, ...) += bias[channel], in place."""
    rows, plane, chunks = _rows(y, channels)
    if rows * chunks:
        _add_bias.launch(provider, y.dtype, (min(rows * chunks, MAX_GRID_X), 1, 1), (BLOCK, 1, 1), y, bias, rows, plane,
                         channels, CHUNK)


def bias_grad(provider, dy, db):
    """db[c] = the sum of dy (N, C, ...) over every axis but the channel's."""
    channels = dy.shape[1]
    rows, plane, chunks = _rows(dy, channels)
    if rows * chunks == 0:
        provider.fill_zero(db)
        return
    part = provider.empty((rows * chunks,), np.float64 if dy.dtype == np.float64 else np.float32)
    _partial.launch(provider, dy.dtype, (min(rows * chunks, MAX_GRID_X), 1, 1), (BLOCK, 1, 1), dy, part, rows, plane,
                    CHUNK)
    sum_slices(provider, part, db, channels, dy.shape[0] * chunks)


def sum_slices(provider, part, out, count, slices):
    """out[i] = the sum over s < slices of part[s * count + i] (part in float32, float64 for
    float64 out), in a fixed order: one warp per element."""
    blocks = min(-(-count // WARPS_PER_BLOCK), MAX_GRID_X)
    _sum_slices.launch(provider, out.dtype, (blocks, 1, 1), (BLOCK, 1, 1), part, out, count, slices)
