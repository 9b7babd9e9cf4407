"""The CPU Transpose kernel: permutations that are batched 2-D transposes run in
ext/transpose.pyx (4- and 8-byte elements), the others in NumPy; every result equals NumPy's."""
import itertools

import numpy as np
import pytest

import minitrain
from minitrain.providers.cpu.shape import MIN_KERNEL_TRANSPOSE, transpose_planes


@pytest.mark.parametrize("shape, perm, planes", [
    ((16, 8, 16, 16), (0, 2, 3, 1), (16, 8, 256)),      # NCHW -> NHWC
    ((16, 16, 16, 8), (0, 3, 1, 2), (16, 256, 8)),      # NHWC -> NCHW
    ((300, 70), (1, 0), (1, 300, 70)),
    ((1, 300, 70), (0, 2, 1), (1, 300, 70)),            # a batch of one: a plain 2-D transpose
    ((2, 9, 1, 33, 7), (0, 4, 2, 1, 3), (2, 297, 7)),   # an axis of size 1 goes anywhere
    ((4, 5, 6), (2, 0, 1), (1, 20, 6)),
    ((4, 5, 6), (1, 0, 2), None),                       # the last axis stays: no 2-D transpose
    ((4, 5, 6, 7), (0, 3, 2, 1), None),
    ((4, 5, 6), (0, 1, 2), None),
])
def test_planes_of_a_permutation(shape, perm, planes):
    assert transpose_planes(shape, perm) == planes


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.float16])
@pytest.mark.parametrize("shape", [(16, 8, 16, 16), (5, 13, 70), (2, 9, 33, 1, 7), (4099, 3), (3, 1, 64, 67)])
def test_every_permutation_equals_numpy(shape, dtype):
    x = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    assert x.size >= MIN_KERNEL_TRANSPOSE
    for perm in itertools.permutations(range(len(shape))):
        y = minitrain.run_node("Transpose", [x], attrs={"perm": list(perm)})[0]
        assert y.dtype == x.dtype and y.flags.c_contiguous
        np.testing.assert_array_equal(y, np.transpose(x, perm))


def test_views_and_default_perm():
    x = np.random.default_rng(1).standard_normal((40, 50, 60))[:, ::2]
    np.testing.assert_array_equal(minitrain.run_node("Transpose", [x], attrs={"perm": [0, 2, 1]})[0],
                                  x.transpose(0, 2, 1))
    np.testing.assert_array_equal(minitrain.run_node("Transpose", [x])[0], x.T)
    y = np.ascontiguousarray(x)
    np.testing.assert_array_equal(minitrain.run_node("Transpose", [y])[0], y.T)
