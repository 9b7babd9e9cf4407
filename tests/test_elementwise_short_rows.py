"""Add/Sub/Mul/Div of a tensor and a short vector over its trailing dims (a bias, a per-channel
scale): the CPU kernels tile the vector into long rows; the result must be NumPy's, bit for
bit, in either operand order, for row counts the tiling does not divide and leading 1s."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.providers.cpu.elementwise import broadcasts_short_rows

UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
SHAPES = [((16, 16, 16, 8), (8,)), ((8,), (4, 4, 8)), ((3, 5, 7), (1, 5, 7)), ((3, 5, 7), (1, 1, 1, 7)),
          ((7, 3), (3,)), ((0, 3), (3,)), ((2, 3, 4), (2, 1, 4)), ((4, 5), ())]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("op", sorted(UFUNCS))
def test_short_row_broadcast_matches_numpy(rng, op, a_shape, b_shape, dtype):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = (rng.standard_normal(b_shape) + 3).astype(dtype)
    (y,) = run_node(op, [a, b])
    expected = UFUNCS[op](a, b)
    assert y.shape == expected.shape and y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("a_shape,b_shape,tiled", [((16, 16, 16, 8), (8,), True), ((8,), (4, 4, 8), True),
                                                   ((3, 5, 7), (1, 1, 1, 7), True), ((2, 3, 4), (2, 1, 4), False),
                                                   ((3, 4), (3, 4), False), ((4, 200), (200,), False), ((16, 16), (16,), False),
                                                   ((16, 16), (), False), ((16, 16), (1, 1), False)])
def test_short_row_broadcast_is_recognised(a_shape, b_shape, tiled):
    assert broadcasts_short_rows(np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)) == tiled
