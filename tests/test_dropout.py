"""Dropout and DropoutGrad: seeded masks, scaling, the mask kept for backward, inference mode."""
import numpy as np
import pytest

import minitrain.random
from minitrain import run_node
from minitrain.errors import DTypeError, ShapeError

TRUE = np.array(True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_training_mode_scales_kept_elements(dtype, rng):
    x = rng.standard_normal((50, 40)).astype(dtype)
    y, mask = run_node("Dropout", [x, np.array(0.25, dtype), TRUE], attrs={"seed": 1})
    assert y.dtype == dtype and mask.dtype == np.bool_
    assert 0.70 < mask.mean() < 0.80
    np.testing.assert_allclose(y[mask], x[mask] / 0.75, rtol=1e-6)
    assert np.all(y[~mask] == 0)


def test_seed_attribute_repeats_and_global_generator_is_seedable(rng):
    x = rng.standard_normal((20, 20))
    a = run_node("Dropout", [x, np.array(0.5), TRUE], attrs={"seed": 7})[1]
    b = run_node("Dropout", [x, np.array(0.5), TRUE], attrs={"seed": 7})[1]
    assert np.array_equal(a, b)
    minitrain.random.seed(3)
    first = run_node("Dropout", [x, np.array(0.5), TRUE])[1]
    second = run_node("Dropout", [x, np.array(0.5), TRUE])[1]
    assert not np.array_equal(first, second), "the global generator advances"
    minitrain.random.seed(3)
    assert np.array_equal(run_node("Dropout", [x, np.array(0.5), TRUE])[1], first)
    state = minitrain.random.get_state()
    after = run_node("Dropout", [x, np.array(0.5), TRUE])[1]
    minitrain.random.set_state(state)
    assert np.array_equal(run_node("Dropout", [x, np.array(0.5), TRUE])[1], after)


def test_inference_mode_is_identity(rng):
    x = rng.standard_normal((3, 4))
    for inputs in ([x], [x, np.array(0.5)], [x, np.array(0.5), np.array(False)]):
        y, mask = run_node("Dropout", inputs)
        np.testing.assert_array_equal(y, x)
        assert mask.all()
        assert y is not x


def test_grad_uses_the_forward_mask(rng):
    x, dy = rng.standard_normal((6, 7)), rng.standard_normal((6, 7))
    _, mask = run_node("Dropout", [x, np.array(0.4), TRUE], attrs={"seed": 2})
    (dx,) = run_node("DropoutGrad", [dy, mask, np.array(0.4), TRUE], domain="com.microsoft")
    np.testing.assert_allclose(dx, dy * mask / 0.6)
    (dx_inf,) = run_node("DropoutGrad", [dy, mask], domain="com.microsoft")
    np.testing.assert_array_equal(dx_inf, dy)


def test_bad_input(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ShapeError, match="ratio"):
        run_node("Dropout", [x, np.array(1.0), TRUE])
    with pytest.raises(ShapeError, match="scalar"):
        run_node("Dropout", [x, np.array([0.1, 0.2]), TRUE])
    with pytest.raises(DTypeError, match="training_mode"):
        run_node("Dropout", [x, np.array(0.1), np.array(1)])
    with pytest.raises(ShapeError, match="same shape"):
        run_node("DropoutGrad", [x, np.ones((2, 2), bool)], domain="com.microsoft")
