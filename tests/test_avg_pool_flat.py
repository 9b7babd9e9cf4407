"""AveragePoolGrad's flat-plane kernel (ext/avg_pool_flat.pyx): stride 1 along H and W with dX
as wide as dY.  Checked against a brute-force window loop in float64, finite differences,
PyTorch where it has the geometry, and malformed tables."""
import itertools
import types

import numpy as np
import pytest

from minitrain import run_node
from minitrain.gradcheck import gradcheck
from minitrain.providers.cpu import pool as cpu_pool

FLAT_CASES = [  # spatial, kernel, pads (begin..., end...), dilations
    ((7, 9), (3, 3), (1, 1, 1, 1), (1, 1)),          # the benchmark's 3x3 s1 p1
    ((6, 11), (5, 5), (2, 2, 2, 2), (1, 1)),         # 5x5 s1 p2: the general tap loops
    ((8, 7), (3, 3), (2, 0, 0, 2), (1, 1)),          # asymmetric pads on both axes
    ((9, 10), (3, 3), (2, 2, 2, 2), (2, 2)),         # dilated
    ((5, 8), (2, 3), (0, 1, 0, 1), (4, 1)),          # H taps 4 apart: rows no window reaches
    ((6, 9), (1, 2), (0, 0, 0, 1), (1, 1)),          # two W taps, pad at the end only
    ((5, 10), (4, 4), (1, 2, 2, 1), (1, 1)),         # even kernel, uneven pads
    ((40, 1), (3, 1), (1, 0, 1, 0), (1, 1)),         # one column
    ((3, 1100), (3, 3), (1, 1, 1, 1), (1, 1)),       # rows wider than a column-table chunk
    ((37,), (3,), (1, 1), (1,)),                     # 1-D
    ((33,), (7,), (2, 4), (1,)),                     # 1-D, uneven pads
]


def reference_grad(dy, x_shape, kernel, pads, dilations, count_include_pad):
    """dX of stride-1 average pooling by visiting every window, in float64."""
    rank = len(kernel)
    dx = np.zeros(x_shape)
    for out in itertools.product(*(range(n) for n in dy.shape[2:])):
        taps = []
        for offsets in itertools.product(*(range(k) for k in kernel)):
            taps.append(tuple(o - pads[a] + offsets[a] * dilations[a] for a, o in enumerate(out)))
        inside = [t for t in taps if all(0 <= t[a] < x_shape[2 + a] for a in range(rank))]
        if count_include_pad:
            padded = [t for t in taps if all(-pads[a] <= t[a] < x_shape[2 + a] + pads[rank + a] for a in range(rank))]
            count = len(padded)
        else:
            count = len(inside)
        for t in inside:
            dx[(slice(None), slice(None)) + t] += dy[(slice(None), slice(None)) + out] / count
    return dx


def attrs_of(kernel, pads, dilations, count_include_pad):
    return dict(kernel_shape=list(kernel), strides=[1] * len(kernel), pads=list(pads), dilations=list(dilations),
                count_include_pad=count_include_pad)


@pytest.fixture
def flat_calls(monkeypatch):
    """The dY shapes avg_pool_grad_flat is called with (plans rebuilt, so none is cached)."""
    calls, kernel = [], cpu_pool._avg_flat.avg_pool_grad_flat

    def spy(dy, *args):
        calls.append(dy.shape)
        return kernel(dy, *args)
    monkeypatch.setattr(cpu_pool, "_avg_flat", types.SimpleNamespace(avg_pool_grad_flat=spy))
    monkeypatch.setattr(cpu_pool, "_PLANS", {})
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("spatial,kernel,pads,dilations", FLAT_CASES)
def test_flat_grad_matches_window_loop(spatial, kernel, pads, dilations, count_include_pad, dtype, rng, flat_calls):
    attrs = attrs_of(kernel, pads, dilations, count_include_pad)
    x = rng.standard_normal((2, 3) + spatial).astype(dtype)
    (y,) = run_node("AveragePool", [x], attrs=attrs, opset=19)
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
    assert flat_calls == [(6, y[0, 0].size)]
    assert dx.shape == x.shape and dx.dtype == dtype
    expected = reference_grad(dy.astype(np.float64), x.shape, kernel, pads, dilations, count_include_pad)
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(dx, expected, **tol)


@pytest.mark.parametrize("spatial,kernel,pads,dilations", FLAT_CASES[:5] + FLAT_CASES[-1:])
def test_flat_grad_gradcheck(spatial, kernel, pads, dilations, rng):
    x = rng.standard_normal((1, 2) + spatial)
    gradcheck("AveragePool", [x], attrs_of(kernel, pads, dilations, 0), opset=19)


def test_an_infinite_gradient_stays_in_its_windows():
    """The column masks select, never multiply: inf * 0 would put NaN in the next row."""
    attrs = attrs_of((3, 3), (1, 1, 1, 1), (1, 1), 0)
    dy = np.zeros((1, 1, 4, 5), np.float32)
    dy[0, 0, 1, 4] = np.inf                        # the last column: its next neighbour is row 2's first
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": dy.shape})
    expected = np.zeros((4, 5), np.float32)
    expected[0:3, 3:5] = np.inf
    np.testing.assert_array_equal(dx[0, 0], expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_grad_threads_and_torch(dtype, threads, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((8, 32, 32, 33)).astype(dtype)     # above the threading threshold
    for count_include_pad in (0, 1):
        tx = torch.from_numpy(x).requires_grad_()
        ty = torch.nn.functional.avg_pool2d(tx, 3, 1, 1, count_include_pad=bool(count_include_pad))
        dy = rng.standard_normal(ty.shape).astype(dtype)
        ty.backward(torch.from_numpy(dy))
        (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs_of((3, 3), (1, 1, 1, 1), (1, 1), count_include_pad),
                         output_shapes={"dX": x.shape})
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)


def test_malformed_tables_are_refused_before_any_read():
    from minitrain._ext.avg_pool_flat import avg_pool_grad_flat
    dy, dx = np.ones((2, 12)), np.empty((2, 12))
    runs, ptr, shifts = np.array([[0, 1], [1, 3]], np.intp), np.array([0, 1, 3], np.intp), np.array([0, 0, -4], np.intp)
    masks, cols, inv = np.ones((1, 4)), np.zeros(1, np.intp), np.empty(0)
    avg_pool_grad_flat(dy, dx, 4, runs, ptr, shifts, inv, masks, cols, 1.0, 1)       # well formed
    np.testing.assert_array_equal(dx, [[1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]] * 2)
    bad = {
        "a row tap leaves dY": dict(shifts=np.array([0, 0, 4], np.intp)),
        "runs do not cover": dict(runs=np.array([[0, 1], [2, 3]], np.intp)),
        "malformed run table": dict(ptr=np.array([0, 1, 2], np.intp)),
        "column tables": dict(masks=np.ones((1, 6))),
        "whole rows": dict(W=5),
    }
    for words, change in bad.items():
        args = dict(W=4, runs=runs, ptr=ptr, shifts=shifts, inv=inv, masks=masks, cols=cols)
        args.update(change)
        with pytest.raises(ValueError, match=words):
            avg_pool_grad_flat(dy, dx, args["W"], args["runs"], args["ptr"], args["shifts"], args["inv"],
                               args["masks"], args["cols"], 1.0, 1)
