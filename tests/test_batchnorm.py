"""BatchNormalization and BatchNormalizationGrad beyond their rows in the op table
(op_table.py: 0D-3D spatial, both modes, NumPy and finite differences): gradient outputs
asked alone, PyTorch, and bad input."""
import re

import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import DTypeError, OpAttributeError, ShapeError
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
