"""Div beyond its row in the op table (op_table.py: values and gradients of every broadcast
pattern): the gradient of one input alone, every opset's schema, and bad input."""
import numpy as np
import pytest

from minitrain import errors, run_node
from minitrain.gradcheck import gradcheck

def away_from_zero(rng, shape):
    """Divisors of magnitude in [0.5, 2.5): finite differences stay accurate."""
    x = rng.uniform(0.5, 2.5, shape)
    return x * rng.choice([-1.0, 1.0], shape)


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
