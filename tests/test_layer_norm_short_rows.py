"""LayerNormalization over short rows (4 to 64 elements, the kernels of ext/layer_norm_short.h):
every width, partial blocks and more rows than one flush of the dscale, dbias partial sums,
with and without bias, on one and two threads: forward and gradients against PyTorch autograd
and finite differences in float64, float32 against float64, and each gradient output alone
equal to the same output computed with the others."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.gradcheck import gradcheck

MS = "com.microsoft"
WIDTHS = (4, 8, 16, 32, 64)
# rows: fewer than a block, a partial block after full ones, more blocks than one flush of 16
ROWS = (5, 37, 16 * 16 + 21)


def _inputs(rng, rows, width, dtype=np.float64):
    x = rng.standard_normal((rows, width)) * 2 + 0.5
    scale, bias = rng.standard_normal(width), rng.standard_normal(width)
    dy = rng.standard_normal((rows, width))
    return [a.astype(dtype) for a in (x, scale, bias, dy)]


def _forward_and_grad(x, scale, bias, dy, outputs=None):
    y, mean, inv_std = run_node("LayerNormalization", [x, scale, bias], attrs={"axis": -1})
    grads = run_node("LayerNormalizationGrad", [dy, x, scale, mean, inv_std], attrs={"axis": -1}, domain=MS,
                     outputs=outputs)
    return (y, mean, inv_std), grads


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_against_torch_autograd(width, rows, with_bias, threads, rng):
    torch = pytest.importorskip("torch")
    x, scale, bias, dy = _inputs(rng, rows, width)
    bias = bias if with_bias else None
    (y, mean, inv_std), (dx, dscale, dbias) = _forward_and_grad(x, scale, bias, dy)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(scale, requires_grad=True)
    tb = torch.tensor(bias, requires_grad=True) if with_bias else None
    ty = torch.nn.functional.layer_norm(tx, (width,), tw, tb)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(mean.reshape(-1), x.mean(axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(inv_std.reshape(-1), 1 / np.sqrt(x.var(axis=1) + 1e-5), rtol=1e-10)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(dscale, tw.grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(dbias, dy.sum(axis=0), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("width", WIDTHS)
def test_finite_differences(width, rng):
    x, scale, bias, _ = _inputs(rng, 19, width)
    gradcheck("LayerNormalization", [x, scale, bias], {"axis": -1}, opset=17, outputs=["Y"])


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("width", WIDTHS)
def test_float32_against_float64(width, rows, threads, rng):
    inputs = _inputs(rng, rows, width)
    (y64, *_), grads64 = _forward_and_grad(*inputs)
    (y32, *_), grads32 = _forward_and_grad(*(a.astype(np.float32) for a in inputs))
    assert y32.dtype == np.float32 and all(g.dtype == np.float32 for g in grads32)
    np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-5)
    for ours, exact in zip(grads32, grads64):
        np.testing.assert_allclose(ours, exact, rtol=1e-4, atol=1e-4 * np.abs(exact).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", WIDTHS)
def test_each_gradient_output_alone(width, dtype, rng):
    inputs = _inputs(rng, ROWS[-1], width, dtype)
    _, (dx, dscale, dbias) = _forward_and_grad(*inputs)
    _, (dx_alone,) = _forward_and_grad(*inputs, outputs=["dX"])
    _, (dscale_alone, dbias_alone) = _forward_and_grad(*inputs, outputs=["dscale", "dbias"])
    np.testing.assert_array_equal(dx_alone, dx)
    np.testing.assert_array_equal(dscale_alone, dscale)
    np.testing.assert_array_equal(dbias_alone, dbias)
