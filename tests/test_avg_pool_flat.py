"""Stride-1 average pooling over flat planes (ext/avg_pool_flat.pyx: AveragePool and
AveragePoolGrad when both strides are 1 and output and input are equally wide).  Checked
against a brute-force window loop in float64, finite differences, PyTorch where it has the
geometry, and malformed tables."""
import itertools
import types

import numpy as np
import pytest

from minitrain import run_node
from minitrain.caches import LRUCache
from minitrain.gradcheck import gradcheck
from minitrain.providers.cpu import pool as cpu_pool
from minitrain.providers import plan_cache

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


def windows(out_shape, x_shape, kernel, pads, dilations, count_include_pad):
    """(output position, input positions its window covers, its count) for every window."""
    rank = len(kernel)
    for out in itertools.product(*(range(n) for n in out_shape)):
        taps = [tuple(o - pads[a] + t[a] * dilations[a] for a, o in enumerate(out))
                for t in itertools.product(*(range(k) for k in kernel))]
        inside = [t for t in taps if all(0 <= t[a] < x_shape[a] for a in range(rank))]
        padded = [t for t in taps if all(-pads[a] <= t[a] < x_shape[a] + pads[rank + a] for a in range(rank))]
        yield out, inside, len(padded) if count_include_pad else len(inside)


def reference(x, dy, kernel, pads, dilations, count_include_pad):
    """AveragePool(x) and AveragePoolGrad(dy) with stride 1, window by window, in float64."""
    y, dx = np.zeros(dy.shape), np.zeros(x.shape)
    every = (slice(None), slice(None))
    for out, inside, count in windows(dy.shape[2:], x.shape[2:], kernel, pads, dilations, count_include_pad):
        y[every + out] = sum(x[every + t] for t in inside) / count
        for t in inside:
            dx[every + t] += dy[every + out] / count
    return y, dx


def attrs_of(kernel, pads, dilations, count_include_pad):
    return dict(kernel_shape=list(kernel), strides=[1] * len(kernel), pads=list(pads), dilations=list(dilations),
                count_include_pad=count_include_pad)


@pytest.fixture
def flat_calls(monkeypatch):
    """The source shapes window_sums is called with (plans rebuilt, so none is cached)."""
    calls, kernel = [], cpu_pool._avg_flat.window_sums

    def spy(src, *args):
        calls.append(src.shape)
        return kernel(src, *args)
    monkeypatch.setattr(cpu_pool, "_avg_flat", types.SimpleNamespace(window_sums=spy))
    monkeypatch.setattr(plan_cache, "_PLANS", LRUCache("test pooling plans"))
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("spatial,kernel,pads,dilations", FLAT_CASES)
def test_flat_pool_and_grad_match_window_loop(spatial, kernel, pads, dilations, count_include_pad, dtype, rng,
                                              flat_calls):
    attrs = attrs_of(kernel, pads, dilations, count_include_pad)
    x = rng.standard_normal((2, 3) + spatial).astype(dtype)
    (y,) = run_node("AveragePool", [x], attrs=attrs, opset=19)
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
    assert flat_calls == [(6, x[0, 0].size), (6, y[0, 0].size)]
    assert y.dtype == dx.dtype == dtype and dx.shape == x.shape
    expected_y, expected_dx = reference(x.astype(np.float64), dy.astype(np.float64), kernel, pads, dilations,
                                        count_include_pad)
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(y, expected_y, **tol)
    np.testing.assert_allclose(dx, expected_dx, **tol)


@pytest.mark.parametrize("spatial,kernel,pads,dilations", FLAT_CASES[:5] + FLAT_CASES[-1:])
def test_flat_pool_gradcheck(spatial, kernel, pads, dilations, rng):
    x = rng.standard_normal((1, 2) + spatial)
    gradcheck("AveragePool", [x], attrs_of(kernel, pads, dilations, 0), opset=19)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_an_infinity_stays_in_its_windows(count_include_pad):
    """The column tables select, never multiply: inf * 0 would put NaN in the next row."""
    attrs = attrs_of((3, 3), (1, 1, 1, 1), (1, 1), count_include_pad)
    a = np.zeros((1, 1, 4, 5), np.float32)
    a[0, 0, 1, 4] = np.inf                        # the last column: its next neighbour is row 2's first
    expected = np.zeros((4, 5), np.float32)
    expected[0:3, 3:5] = np.inf
    (y,) = run_node("AveragePool", [a], attrs=attrs)
    (dx,) = run_node("AveragePoolGrad", [a], attrs=attrs, output_shapes={"dX": a.shape})
    np.testing.assert_array_equal(y[0, 0], expected)
    np.testing.assert_array_equal(dx[0, 0], expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_pool_threads_and_torch(dtype, threads, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((8, 32, 32, 33)).astype(dtype)     # above the threading threshold
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    for count_include_pad in (0, 1):
        attrs = attrs_of((3, 3), (1, 1, 1, 1), (1, 1), count_include_pad)
        tx = torch.from_numpy(x).requires_grad_()
        ty = torch.nn.functional.avg_pool2d(tx, 3, 1, 1, count_include_pad=bool(count_include_pad))
        (y,) = run_node("AveragePool", [x], attrs=attrs)
        np.testing.assert_allclose(y, ty.detach().numpy(), **tol)
        dy = rng.standard_normal(ty.shape).astype(dtype)
        ty.backward(torch.from_numpy(dy))
        (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
        np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)


def test_malformed_tables_are_refused_before_any_read():
    from minitrain._ext.avg_pool_flat import window_sums
    src, dst = np.ones((2, 12)), np.empty((2, 12))
    good = dict(W=4, runs=np.array([[0, 1], [1, 3]], np.intp), ptr=np.array([0, 1, 3], np.intp),
                shifts=np.array([0, 0, -4], np.intp), weights=np.empty(0), tables=np.ones((1, 4)),
                cols=np.zeros(1, np.intp))

    def call(**change):
        args = dict(good, **change)
        window_sums(src, dst, args["W"], args["runs"], args["ptr"], args["shifts"], args["weights"], args["tables"],
                    args["cols"], 1.0, 1)
    call()
    np.testing.assert_array_equal(dst, [[1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]] * 2)
    bad = {
        "a row tap leaves the source": dict(shifts=np.array([0, 0, 4], np.intp)),
        "runs do not cover": dict(runs=np.array([[0, 1], [2, 3]], np.intp)),
        "malformed run table": dict(ptr=np.array([0, 1, 2], np.intp)),
        "column tables": dict(tables=np.ones((1, 6))),
        "weights": dict(weights=np.ones(2)),
        "whole rows": dict(W=5),
    }
    for words, change in bad.items():
        with pytest.raises(ValueError, match=words):
            call(**change)
