"""BatchNormalization and BatchNormalizationGrad beyond their rows in the op table
(op_table.py: 0D-3D spatial, both modes, NumPy and finite differences): gradient outputs
asked alone, PyTorch, the kernel's two layouts (planes of 32 elements or more, blocks of
channels of smaller planes) at every thread count, and bad input."""
import re

import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import DTypeError, OpAttributeError, ShapeError
from minitrain.gradcheck import gradcheck
from op_table import batchnorm

SHAPES = [(5, 3), (3, 2, 7), (2, 3, 4, 5), (2, 2, 3, 2, 3)]


def _inputs(shape, dtype, rng):
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    scale, bias = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
    mean, var = rng.standard_normal(c).astype(dtype), (rng.random(c) + 0.5).astype(dtype)
    return x, scale, bias, mean, var


def test_grad_kernel_computes_only_what_is_asked(rng):
    x, scale, bias, mean, var = _inputs((4, 3, 5), np.float64, rng)
    _, _, _, sm, sis = run_node("BatchNormalization", [x, scale, bias, mean, var], attrs={"training_mode": 1})
    dy = rng.standard_normal(x.shape)
    full = run_node("BatchNormalizationGrad", [dy, x, scale, sm, sis], attrs={"training_mode": 1},
                    domain="com.microsoft")
    (dscale,) = run_node("BatchNormalizationGrad", [dy, x, scale, sm, sis], attrs={"training_mode": 1},
                         domain="com.microsoft", outputs=["dscale"])
    np.testing.assert_array_equal(dscale, full[1])
    (dx,) = run_node("BatchNormalizationGrad", [dy, x, scale, sm, sis], attrs={"training_mode": 1},
                     domain="com.microsoft", outputs=["dX"])
    np.testing.assert_array_equal(dx, full[0])


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: f"{len(s) - 2}d")
def test_against_torch(shape, rng):
    torch = pytest.importorskip("torch")
    x, scale, bias, mean, var = _inputs(shape, np.float64, rng)
    dy = rng.standard_normal(shape)
    y, rm, _, sm, sis = run_node("BatchNormalization", [x, scale, bias, mean, var],
                                 attrs={"training_mode": 1, "momentum": 0.9})
    dx, dscale, dbias = run_node("BatchNormalizationGrad", [dy, x, scale, sm, sis],
                                 attrs={"training_mode": 1}, domain="com.microsoft")
    tx, ts, tb = (torch.tensor(a, requires_grad=True) for a in (x, scale, bias))
    trm = torch.tensor(mean.copy())
    ty = torch.nn.functional.batch_norm(tx, trm, torch.tensor(var.copy()), ts, tb, training=True, momentum=0.1)
    ty.backward(torch.tensor(dy))
    for ours, theirs in ((y, ty), (rm, trm), (dx, tx.grad), (dscale, ts.grad), (dbias, tb.grad)):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-10, atol=1e-10)


def test_bad_input_names_the_problem(rng):
    x, scale, bias, mean, var = _inputs((2, 3, 4), np.float32, rng)
    with pytest.raises(ShapeError, match=r"'scale' has shape \(4,\)"):
        run_node("BatchNormalization", [x, np.ones(4, np.float32), bias, mean, var])
    with pytest.raises(ShapeError, match="rank"):
        run_node("BatchNormalization", [x.reshape(-1), scale, bias, mean, var])
    with pytest.raises(OpAttributeError, match="momentum"):
        run_node("BatchNormalization", [x, scale, bias, mean, var], attrs={"momentum": 2.0})
    with pytest.raises(OpAttributeError, match="epsilon"):
        run_node("BatchNormalization", [x, scale, bias, mean, var], attrs={"epsilon": 0.0})
    with pytest.raises(ShapeError, match="training mode"):
        run_node("BatchNormalization", [x, scale, bias, mean, var], outputs=["Y", "running_mean"])
    with pytest.raises(DTypeError):
        run_node("BatchNormalization", [x, scale.astype(np.float64), bias, mean, var])


@pytest.mark.parametrize("which,shape", [(0, (2, 3, 1)), (0, (2, 3, 5)), (0, (1, 3, 4)), (0, (2, 2, 4)),
                                         (2, (4,)), (3, (2,)), (4, (3, 1))])
def test_grad_checks_every_input_against_x(which, shape, rng):
    """Each of dY, scale, mean and inv_std must fit X (2, 3, 4); the kernel indexes them with
    X's sizes, so a mismatch read out of bounds before the schema compared full shapes."""
    x, scale, _, mean, var = _inputs((2, 3, 4), np.float32, rng)
    inputs = [np.ones_like(x), x, scale, mean, 1 / np.sqrt(var)]
    inputs[which] = np.ones(shape, np.float32)
    name = ["dY", "X", "scale", "mean", "inv_std"][which]
    with pytest.raises(ShapeError, match=re.escape(f"BatchNormalizationGrad: input '{name}' has shape {shape}")):
        run_node("BatchNormalizationGrad", inputs, domain="com.microsoft")


def test_default_epsilon_and_momentum_are_the_float32_values_onnx_holds(rng):
    """ONNX holds float attributes as float32: the defaults are float32(1e-5) and float32(0.9),
    so float64 results match ONNX Runtime's (a small variance makes epsilon's rounding show)."""
    x, scale, bias, mean, var = _inputs((4, 3, 5), np.float64, rng)
    var = var * 1e-4
    eps, momentum = float(np.float32(1e-5)), float(np.float32(0.9))
    (y,) = run_node("BatchNormalization", [x, scale, bias, mean, var], outputs=["Y"])
    args, constants = [x, scale, bias, mean, var], {"epsilon": eps, "momentum": momentum}
    np.testing.assert_allclose(y, batchnorm(args, constants)["Y"], rtol=1e-13)
    _, rm, rv = run_node("BatchNormalization", [x, scale, bias, mean, var], attrs={"training_mode": 1},
                         outputs=["Y", "running_mean", "running_var"])
    expected = batchnorm(args, constants | {"training_mode": 1})
    np.testing.assert_allclose(rm, expected["running_mean"], rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(rv, expected["running_var"], rtol=1e-14, atol=1e-300)


# Planes of 32 elements or more go one channel at a time, in 32 lanes plus a tail (here 7 x 7 =
# 49, 16 x 16 = 256); smaller ones in blocks of 512-element rows (256 channels of 2 x 2: two
# blocks; (N, C) input: planes of one element).
LAYOUT_SHAPES = [(3, 5, 7, 7), (2, 3, 16, 16), (4, 256, 2, 2), (6, 600), (3, 40, 3)]


def _reference_grad(dy, x, scale, training):
    """BatchNormalizationGrad in float64 NumPy (batch statistics when training)."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, inv_std = x.mean(axis=axes), 1 / np.sqrt(x.var(axis=axes) + float(np.float32(1e-5)))
    x_hat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
    dbias, dscale = dy.sum(axis=axes), (dy * x_hat).sum(axis=axes)
    dx = dy * (scale * inv_std).reshape(shape)
    if training:
        count = x.size // x.shape[1]
        dx = dx - (scale * inv_std).reshape(shape) * (dbias.reshape(shape) + x_hat * dscale.reshape(shape)) / count
    return dx, dscale, dbias, mean, inv_std


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=str)
def test_both_layouts_match_numpy_at_every_thread_count(shape, dtype, threads, rng):
    x, scale, bias, mean, var = _inputs(shape, dtype, rng)
    x = x + 3      # off zero: the variance pass must subtract the mean
    dy = rng.standard_normal(shape).astype(dtype)
    constants = {"epsilon": float(np.float32(1e-5)), "momentum": float(np.float32(0.9))}
    expected = batchnorm([a.astype(np.float64) for a in (x, scale, bias, mean, var)], constants | {"training_mode": 1})
    y, rm, rv, sm, sis = run_node("BatchNormalization", [x, scale, bias, mean, var],
                                  attrs={"training_mode": 1})
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-11}
    for name, ours in zip(("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"), (y, rm, rv, sm, sis)):
        assert ours.dtype == dtype
        np.testing.assert_allclose(ours, expected[name], **tol, err_msg=name)
    for training in (1, 0):
        grads = run_node("BatchNormalizationGrad", [dy, x, scale, sm, sis], attrs={"training_mode": training},
                         domain="com.microsoft")
        wanted = _reference_grad(*(a.astype(np.float64) for a in (dy, x, scale)), training)
        for name, ours, theirs in zip(("dX", "dscale", "dbias"), grads, wanted):
            np.testing.assert_allclose(ours, theirs, **tol, err_msg=f"{name}, training_mode={training}")
    (y_inference,) = run_node("BatchNormalization", [x, scale, bias, mean, var], outputs=["Y"])
    np.testing.assert_allclose(y_inference, batchnorm([x, scale, bias, mean, var], constants)["Y"], **tol)


@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=str)
def test_results_do_not_depend_on_the_thread_count(shape, rng):
    """Sums run in an order fixed by the shape: one thread and two give the same bits."""
    import minitrain
    x, scale, bias, mean, var = _inputs(shape, np.float32, rng)
    dy = rng.standard_normal(shape).astype(np.float32)
    old = minitrain.get_num_threads()
    results = []
    try:
        for count in (1, 2):
            minitrain.set_num_threads(count)
            forward = run_node("BatchNormalization", [x, scale, bias, mean, var], attrs={"training_mode": 1})
            backward = run_node("BatchNormalizationGrad", [dy, x, scale, forward[3], forward[4]],
                                attrs={"training_mode": 1}, domain="com.microsoft")
            results.append(forward + backward)
    finally:
        minitrain.set_num_threads(old)
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("shape", [(2, 2, 5, 7), (3, 2, 33), (2, 40, 2)], ids=str)
def test_gradients_of_both_layouts_against_finite_differences(shape, rng):
    x, scale, bias, mean, var = _inputs(shape, np.float64, rng)
    gradcheck("BatchNormalization", [x, scale, bias, mean, var], {"training_mode": 1}, wrt=[0, 1, 2],
              outputs=["Y"])


def test_empty_batch_in_inference_still_gives_statistics_and_zero_sums(rng):
    """No element per channel: inference still yields the saved statistics, and the gradient's
    sums are zero, not whatever memory held."""
    _, scale, bias, mean, var = _inputs((2, 3), np.float64, rng)
    x = np.zeros((0, 3, 4))
    y, sm, sis = run_node("BatchNormalization", [x, scale, bias, mean, var], outputs=["Y", "saved_mean", "saved_inv_std"])
    assert y.shape == x.shape
    np.testing.assert_allclose(sis, 1 / np.sqrt(var + 1e-5))
    np.testing.assert_array_equal(sm, mean)
    dx, dscale, dbias = run_node("BatchNormalizationGrad", [x, x, scale, sm, sis], domain="com.microsoft")
    assert dx.shape == x.shape
    np.testing.assert_array_equal(dscale, 0)
    np.testing.assert_array_equal(dbias, 0)
