"""Div: broadcasting forward values against NumPy, its gradient builder against float64
central finite differences (both inputs, broadcast either way), and bad input."""
import numpy as np
import pytest

from minitrain import errors, run_node
from minitrain.gradcheck import gradcheck

SHAPES = [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)),
          ((2, 1, 4), (1, 3, 1)), ((), (2, 3))]


def away_from_zero(rng, shape):
    """Divisors of magnitude in [0.5, 2.5): finite differences stay accurate."""
    x = rng.uniform(0.5, 2.5, shape)
    return x * rng.choice([-1.0, 1.0], shape)


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_numpy(a_shape, b_shape, dtype, rng):
    a, b = rng.standard_normal(a_shape).astype(dtype), away_from_zero(rng, b_shape).astype(dtype)
    (c,) = run_node("Div", [a, b])
    assert c.dtype == dtype and c.shape == np.broadcast_shapes(a_shape, b_shape)
    np.testing.assert_allclose(c, a / b, rtol=1e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
def test_gradcheck(a_shape, b_shape, rng):
    gradcheck("Div", [rng.standard_normal(a_shape), away_from_zero(rng, b_shape)])


@pytest.mark.parametrize("wrt", [(0,), (1,)])
def test_gradcheck_one_input(wrt, rng):
    gradcheck("Div", [rng.standard_normal((3, 4)), away_from_zero(rng, (4,))], wrt=wrt)


@pytest.mark.parametrize("opset", [7, 13, 14])
def test_versions(opset, rng):
    a, b = rng.standard_normal((2, 3)), away_from_zero(rng, (3,))
    np.testing.assert_allclose(run_node("Div", [a, b], opset=opset)[0], a / b, rtol=1e-15)


def test_bad_input():
    with pytest.raises(errors.ShapeError, match="Div"):
        run_node("Div", [np.zeros((2, 3)), np.ones((4,))])
    with pytest.raises(errors.DTypeError):
        run_node("Div", [np.zeros((2, 3)), np.ones((2, 3), np.float32)])
