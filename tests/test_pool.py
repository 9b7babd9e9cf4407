"""Pooling: MaxPool (with ONNX Indices), AveragePool, global pooling and their gradients.

Checked against PyTorch (values, indices after converting its per-plane indices, autograd),
against finite differences in float64 (max pooling on tie-free inputs), across ONNX versions,
and on bad input.  Global pooling's values and gradients, and float32 against float64 for
every pooling kernel: the op table (op_table.py)."""
import re

import numpy as np
import pytest

from minitrain import errors, run_node
from minitrain.gradcheck import gradcheck

MS = "com.microsoft"


def distinct(rng, shape, spacing=0.01):
    """Values at least `spacing` apart (no ties, so the argmax survives finite differences)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * spacing - n * spacing / 2 + rng.uniform(0, spacing / 10, n)).reshape(shape)


def torch_or_skip():
    return pytest.importorskip("torch")


def torch_pool(torch, kind, x, kernel, stride, pad, ceil=False, count_include_pad=True, dilation=1):
    F = torch.nn.functional
    rank = x.dim() - 2
    if kind == "max":
        fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[rank - 1]
        return fn(x, kernel, stride, pad, dilation=dilation, ceil_mode=ceil, return_indices=True)
    fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[rank - 1]
    return fn(x, kernel, stride, pad, ceil_mode=ceil, count_include_pad=count_include_pad)


def onnx_attrs(kernel, stride, pad, ceil=False, dilation=None, **extra):
    rank = len(kernel)
    attrs = dict(kernel_shape=list(kernel), strides=list(stride), pads=list(pad) * 2, ceil_mode=int(ceil), **extra)
    if dilation is not None:
        attrs["dilations"] = [dilation] * rank
    return attrs


def plane_to_global(indices, spatial_size):
    """PyTorch's per-plane indices -> ONNX's indices over the whole N*C*spatial tensor."""
    n, c = indices.shape[:2]
    offsets = (np.arange(n * c, dtype=np.int64) * spatial_size).reshape((n, c) + (1,) * (indices.ndim - 2))
    return indices + offsets


MAX_CASES = [  # spatial shape, kernel, stride, pad, ceil, dilation
    ((9,), (3,), (2,), (1,), False, 1),
    ((10,), (2,), (3,), (0,), True, 2),
    ((7, 9), (3, 2), (2, 2), (1, 1), False, 1),
    ((8, 9), (3, 3), (2, 1), (1, 0), True, 1),
    ((9, 8), (2, 3), (2, 2), (1, 1), True, 2),
    ((5, 6, 7), (2, 3, 2), (2, 2, 1), (1, 1, 0), False, 1),
    ((6, 5, 7), (3, 2, 2), (2, 1, 3), (1, 0, 1), True, 1),
]


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil,dilation", MAX_CASES)
def test_max_pool_matches_torch(spatial, kernel, stride, pad, ceil, dilation, rng):
    torch = torch_or_skip()
    x = rng.standard_normal((2, 3) + spatial)
    attrs = onnx_attrs(kernel, stride, pad, ceil, dilation)
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    ty, tind = torch_pool(torch, "max", torch.from_numpy(x), kernel, stride, pad, ceil, dilation=dilation)
    np.testing.assert_array_equal(y, ty.numpy())
    np.testing.assert_array_equal(indices, plane_to_global(tind.numpy(), int(np.prod(spatial))))
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)

    dy = rng.standard_normal(y.shape)
    tx = torch.from_numpy(x).requires_grad_()
    torch_pool(torch, "max", tx, kernel, stride, pad, ceil, dilation=dilation)[0].backward(torch.from_numpy(dy))
    (dx,) = run_node("MaxPoolGrad", [dy, indices], attrs=attrs, output_shapes={"dX": x.shape})
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_max_pool_storage_order_column_major(rng):
    x = distinct(rng, (2, 3, 5, 6))
    attrs = dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 1, 0, 1])
    y, row_major = run_node("MaxPool", [x], attrs=attrs)
    y2, col_major = run_node("MaxPool", [x], attrs={**attrs, "storage_order": 1})
    np.testing.assert_array_equal(y, y2)
    plane, local = np.divmod(row_major, 30)
    h, w = np.divmod(local, 6)
    np.testing.assert_array_equal(col_major, plane * 30 + h + w * 5)
    dy = rng.standard_normal(y.shape)
    (a,) = run_node("MaxPoolGrad", [dy, row_major], attrs=attrs, output_shapes={"dX": x.shape})
    (b,) = run_node("MaxPoolGrad", [dy, col_major], attrs={**attrs, "storage_order": 1}, output_shapes={"dX": x.shape})
    np.testing.assert_array_equal(a, b)


def test_max_pool_storage_order_3d(rng):
    x = distinct(rng, (1, 2, 3, 4, 5))
    attrs = dict(kernel_shape=[2, 2, 2])
    _, row_major = run_node("MaxPool", [x], attrs=attrs)
    _, col_major = run_node("MaxPool", [x], attrs={**attrs, "storage_order": 1})
    plane, local = np.divmod(row_major, 60)
    d, rest = np.divmod(local, 20)
    h, w = np.divmod(rest, 5)
    np.testing.assert_array_equal(col_major, plane * 60 + d + h * 3 + w * 12)


def test_ties_take_the_first_maximum_and_padding_never_wins():
    x = np.full((1, 1, 4, 4), -5.0)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = x[0, 0, 2, 1] = 7.0
    y, indices = run_node("MaxPool", [x], attrs=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]))
    assert indices[0, 0, 0, 0] == 5 and y[0, 0, 0, 0] == 7.0
    assert indices[0, 0, 1, 1] == 5 and indices[0, 0, 2, 0] == 5 and indices[0, 0, 3, 0] == 9
    y, indices = run_node("MaxPool", [np.full((1, 1, 3), -np.inf)], attrs=dict(kernel_shape=[2], pads=[1, 1]))
    np.testing.assert_array_equal(indices.reshape(-1), [0, 0, 1, 2])  # all -inf: still real positions
    assert np.all(y == -np.inf)


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil,dilation", MAX_CASES[::2])
def test_max_pool_gradcheck(spatial, kernel, stride, pad, ceil, dilation, rng):
    x = distinct(rng, (1, 2) + spatial)
    gradcheck("MaxPool", [x], onnx_attrs(kernel, stride, pad, ceil, dilation), outputs=["Y"])


AVG_CASES = [  # spatial, kernel, stride, pad, ceil (stride 1 everywhere takes the gather path)
    ((9,), (3,), (2,), (1,), False),
    ((9,), (4,), (1,), (2,), False),
    ((5, 4, 6), (3, 2, 3), (1, 1, 1), (1, 1, 1), False),
    ((4, 6, 5), (2, 5, 1), (1, 1, 1), (0, 2, 0), True),
    ((10,), (4,), (3,), (2,), True),
    ((7, 9), (3, 2), (2, 2), (1, 1), False),
    ((8, 7), (3, 3), (2, 2), (1, 1), True),
    ((6, 7), (3, 3), (1, 1), (1, 1), False),
    ((4, 5, 7), (2, 3, 2), (2, 2, 1), (1, 1, 0), False),
    ((5, 4, 6), (3, 2, 3), (2, 1, 2), (1, 0, 1), True),
]


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil", AVG_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_matches_torch(spatial, kernel, stride, pad, ceil, count_include_pad, rng):
    torch = torch_or_skip()
    x = rng.standard_normal((2, 3) + spatial)
    attrs = onnx_attrs(kernel, stride, pad, ceil, count_include_pad=count_include_pad)
    (y,) = run_node("AveragePool", [x], attrs=attrs)
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch_pool(torch, "avg", tx, kernel, stride, pad, ceil, bool(count_include_pad))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    dy = rng.standard_normal(y.shape)
    ty.backward(torch.from_numpy(dy))
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil", AVG_CASES[::2] + AVG_CASES[3:4])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_gradcheck(spatial, kernel, stride, pad, ceil, count_include_pad, rng):
    x = rng.standard_normal((1, 2) + spatial)
    gradcheck("AveragePool", [x], onnx_attrs(kernel, stride, pad, ceil, count_include_pad=count_include_pad))


@pytest.mark.parametrize("strides", [[1, 1, 2], [1, 1, 1]])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_3d_overlapping_windows_on_non_cubic_input(count_include_pad, strides, rng):
    """Stride < kernel on a (3, 5, 7) volume: where ONNX Runtime's own 3D AveragePoolGrad
    assigns instead of adding and mixes up the axes.  Checked by finite differences and torch."""
    x = rng.standard_normal((1, 2, 3, 5, 7))
    attrs = dict(kernel_shape=[2, 3, 3], strides=strides, pads=[1, 1, 0, 0, 1, 1],
                 count_include_pad=count_include_pad)
    results = gradcheck("AveragePool", [x], attrs)
    analytic = results[0][0]
    torch = pytest.importorskip("torch")
    # ONNX pads (begin d,h,w = 1,1,0; end = 0,1,1) are asymmetric: run torch on explicitly padded input
    tx = torch.from_numpy(x).requires_grad_()
    padded = torch.nn.functional.pad(tx, (0, 1, 1, 1, 1, 0))
    window_sum = torch.nn.functional.avg_pool3d(padded, (2, 3, 3), tuple(strides), divisor_override=1)
    ones = torch.nn.functional.pad(torch.ones_like(tx), (0, 1, 1, 1, 1, 0), value=float(count_include_pad))
    counts = torch.nn.functional.avg_pool3d(ones, (2, 3, 3), tuple(strides), divisor_override=1)
    ty = window_sum / counts
    (y,) = run_node("AveragePool", [x], attrs=attrs)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    dy = np.random.default_rng(0).standard_normal(y.shape)
    ty.backward(torch.from_numpy(dy))
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert analytic.shape == x.shape


def test_average_pool_dilations_from_opset_19(rng):
    x = rng.standard_normal((1, 2, 9, 8))
    attrs = dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)
    (y,) = run_node("AveragePool", [x], attrs=attrs, opset=19)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=np.nan)
    expected = np.empty(y.shape)
    for i in range(y.shape[2]):
        for j in range(y.shape[3]):
            expected[:, :, i, j] = np.nanmean(xp[:, :, i:i + 3:2, j:j + 5:2], axis=(2, 3))
    np.testing.assert_allclose(y, expected, rtol=1e-12)
    gradcheck("AveragePool", [x[:, :1, :6, :6]], attrs, opset=19)
    with pytest.raises(errors.OpAttributeError, match="dilations"):
        run_node("AveragePool", [x], attrs=attrs, opset=18)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad(auto_pad, rng):
    x = rng.standard_normal((1, 1, 7, 6))
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad=auto_pad)
    y, _ = run_node("MaxPool", [x], attrs=attrs)
    if auto_pad == "VALID":
        assert y.shape == (1, 1, 3, 3)
        return
    assert y.shape == (1, 1, 4, 3)
    # total pads: rows (4-1)*2+3-7 = 2 -> 1+1, columns (3-1)*2+2-6 = 0
    (ref, _) = run_node("MaxPool", [x], attrs=dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0]))
    np.testing.assert_array_equal(y, ref)
    x5 = rng.standard_normal((1, 1, 5))   # total pad (3 - 1) * 2 + 2 - 5 = 1
    (y5, _) = run_node("MaxPool", [x5], attrs=dict(kernel_shape=[2], strides=[2], auto_pad=auto_pad))
    lo = 1 if auto_pad == "SAME_LOWER" else 0
    (r5, _) = run_node("MaxPool", [x5], attrs=dict(kernel_shape=[2], strides=[2], pads=[lo, 1 - lo]))
    np.testing.assert_array_equal(y5, r5)


def test_max_pool_versions(rng):
    x = rng.standard_normal((1, 1, 5, 5))
    base = dict(kernel_shape=[2, 2], strides=[2, 2])
    with pytest.raises(errors.OpAttributeError, match="Indices"):
        run_node("MaxPool", [x], attrs=base, opset=7, outputs=["Y", "Indices"])
    (y7,) = run_node("MaxPool", [x], attrs=base, opset=7)
    y8, i8 = run_node("MaxPool", [x], attrs=base, opset=8)
    np.testing.assert_array_equal(y7, y8)
    with pytest.raises(errors.OpAttributeError, match="ceil_mode"):
        run_node("MaxPool", [x], attrs={**base, "ceil_mode": 1}, opset=9)
    with pytest.raises(errors.OpAttributeError, match="storage_order"):
        run_node("MaxPool", [x], attrs={**base, "storage_order": 1}, opset=7)
    y10, _ = run_node("MaxPool", [x], attrs={**base, "ceil_mode": 1}, opset=10)
    assert y10.shape == (1, 1, 3, 3)
    for opset in (11, 12, 19):
        assert run_node("MaxPool", [x], attrs={**base, "dilations": [2, 2]}, opset=opset)[0].shape == (1, 1, 2, 2)
    with pytest.raises(errors.OpAttributeError, match="count_include_pad"):
        run_node("AveragePool", [x], attrs={**base, "count_include_pad": 1}, opset=6)


def test_gradient_builder_requests_indices():
    from minitrain import Graph
    from minitrain.autodiff import build_gradient_graph
    g = Graph(name="pool")
    g.add_input("x", np.float64, (2, 3, 6, 6))
    g.add_input("seed", np.float64, (2, 3, 3, 3))
    g.outputs.append(g.add_node("MaxPool", ["x"], ["y"], dict(kernel_shape=[2, 2], strides=[2, 2]), name="mp"))
    grad_graph, grads = build_gradient_graph(g, "y", ["x"], seeds={"y": "seed"})
    forward = next(n for n in grad_graph.nodes if n.op_type == "MaxPool")
    backward = next(n for n in grad_graph.nodes if n.op_type == "MaxPoolGrad")
    assert forward.outputs[1] and backward.inputs == ["seed", forward.outputs[1]]
    assert backward.domain == "" and backward.attrs["kernel_shape"] == [2, 2]


def test_average_pool_grad_takes_dx_shape_from_graph_or_infers_smallest(rng):
    x = rng.standard_normal((1, 2, 7, 7))          # floor mode drops the last row and column
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    (y,) = run_node("AveragePool", [x], attrs=attrs)
    dy = rng.standard_normal(y.shape)
    (full,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
    (small,) = run_node("AveragePoolGrad", [dy], attrs=attrs)
    assert full.shape == (1, 2, 7, 7) and small.shape == (1, 2, 6, 6)
    np.testing.assert_array_equal(full[:, :, :6, :6], small)
    assert not full[:, :, 6, :].any() and not full[:, :, :, 6].any()
    (ceil,) = run_node("AveragePoolGrad", [dy], attrs={**attrs, "ceil_mode": 1})
    assert ceil.shape == (1, 2, 5, 5)
    for wrong in ((1, 2, 9, 7), (1, 3, 7, 7), (1, 2, 7)):
        with pytest.raises(errors.ShapeError, match="dX"):
            run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": wrong})


def test_max_pool_grad_takes_dx_shape_from_graph_or_infers_smallest(rng):
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    x7 = rng.standard_normal((1, 2, 7, 7))
    y, indices = run_node("MaxPool", [x7], attrs=attrs)
    (dx,) = run_node("MaxPoolGrad", [y, indices], attrs=attrs, output_shapes={"dX": x7.shape})
    assert dx.shape == x7.shape and np.count_nonzero(dx) == y.size
    # without the graph's shape dX would be (6, 6), which these indices do not fit: an error,
    # never a write out of bounds
    with pytest.raises(errors.ShapeError, match="Indices"):
        run_node("MaxPoolGrad", [y, indices], attrs=attrs)
    x6 = x7[:, :, :6, :6]
    y, indices = run_node("MaxPool", [x6], attrs=attrs)
    (dx,) = run_node("MaxPoolGrad", [y, indices], attrs=attrs)
    assert dx.shape == x6.shape
    with pytest.raises(errors.ShapeError, match="dX"):
        run_node("MaxPoolGrad", [y, indices], attrs=attrs, output_shapes={"dX": (1, 2, 9, 9)})


def test_gradient_of_truncating_pool_in_a_graph(rng):
    """Through autodiff the gradient op learns dX = (.., 7, 7) from the graph, not (6, 6)."""
    x = distinct(rng, (1, 1, 7, 5))
    gradcheck("MaxPool", [x], dict(kernel_shape=[2, 2], strides=[2, 2]), outputs=["Y"])
    gradcheck("AveragePool", [x], dict(kernel_shape=[3, 2], strides=[2, 2]))


def test_global_max_pool_gradient_goes_to_first_maximum():
    x = np.array([[[[1.0, 3.0], [3.0, 2.0]]]])
    (dx,) = run_node("GlobalMaxPoolGrad", [np.array([[[[5.0]]]]), x], domain=MS)
    np.testing.assert_array_equal(dx, [[[[0, 5.0], [0, 0]]]])
    (da,) = run_node("GlobalAveragePoolGrad", [np.array([[[[4.0]]]]), np.array([1, 1, 2, 2])], domain=MS)
    np.testing.assert_array_equal(da, np.ones((1, 1, 2, 2)))


# --------------------------------------------------------------------------- bad input
BAD_ATTRS = [
    (dict(kernel_shape=[9, 2]), errors.ShapeError, "larger than the padded"),
    (dict(kernel_shape=[2, 2], pads=[-1, 0, 0, 0]), errors.OpAttributeError, "negative"),
    (dict(kernel_shape=[2, 2], pads=[1, 1]), errors.OpAttributeError, "pads"),
    (dict(kernel_shape=[2, 2], strides=[0, 1]), errors.OpAttributeError, "strides"),
    (dict(kernel_shape=[2, 2], strides=[1]), errors.OpAttributeError, "strides"),
    (dict(kernel_shape=[2, 2], dilations=[1, 0]), errors.OpAttributeError, "dilations"),
    (dict(kernel_shape=[2]), errors.ShapeError, "kernel_shape"),
    (dict(kernel_shape=[0, 2]), errors.OpAttributeError, "kernel_shape"),
    (dict(kernel_shape=[2, 2], pads=[3, 0, 0, 0]), errors.ShapeError, "only padding"),
    (dict(kernel_shape=[2, 2], auto_pad="SAME"), errors.OpAttributeError, "auto_pad"),
    (dict(kernel_shape=[2, 2], auto_pad="VALID", pads=[1, 1, 1, 1]), errors.OpAttributeError, "pads"),
    (dict(kernel_shape=[2, 2], ceil_mode=2), errors.OpAttributeError, "ceil_mode"),
]


@pytest.mark.parametrize("attrs,error,words", BAD_ATTRS)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_bad_attributes(op, attrs, error, words):
    with pytest.raises(error, match=words) as info:
        run_node(op, [np.zeros((1, 1, 5, 5))], attrs=attrs)
    assert op in str(info.value)


def test_missing_kernel_shape_and_bad_rank():
    with pytest.raises(errors.OpAttributeError, match="kernel_shape"):
        run_node("MaxPool", [np.zeros((1, 1, 5, 5))])
    with pytest.raises(errors.ShapeError, match="spatial"):
        run_node("AveragePool", [np.zeros((5, 5))], attrs=dict(kernel_shape=[2, 2]))
    with pytest.raises(errors.ShapeError):
        run_node("GlobalMaxPool", [np.zeros((1, 1, 2, 2, 2, 2))])


def test_bad_indices(rng):
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    x = rng.standard_normal((2, 2, 4, 4))
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    with pytest.raises(errors.ShapeError, match="Indices"):
        run_node("MaxPoolGrad", [y, indices[:, :, :1]], attrs=attrs)
    for bad_value, where in ((-1, (0, 0, 0, 0)), (10 ** 12, (1, 1, 1, 1)), (16, (0, 0, 1, 0))):
        bad = indices.copy()
        bad[where] = bad_value      # 16 is in range overall but belongs to the next plane
        with pytest.raises(errors.ShapeError, match=re.escape(f"holds {bad_value} at {where}")):
            run_node("MaxPoolGrad", [y, bad], attrs=attrs, output_shapes={"dX": x.shape})
    with pytest.raises(errors.DTypeError, match="Indices"):
        run_node("MaxPoolGrad", [y, indices.astype(np.int32)], attrs=attrs)


def test_unsupported_dtypes():
    attrs = dict(kernel_shape=[2, 2])
    with pytest.raises(errors.KernelNotFoundError, match="float16"):
        run_node("MaxPool", [np.zeros((1, 1, 4, 4), np.float16)], attrs=attrs)
    with pytest.raises(errors.DTypeError):
        run_node("AveragePool", [np.zeros((1, 1, 4, 4), np.int64)], attrs=attrs)


def test_gradient_ops_reject_unknown_attributes():
    with pytest.raises(errors.OpAttributeError, match="group"):
        run_node("AveragePoolGrad", [np.zeros((1, 1, 2, 2))], attrs=dict(kernel_shape=[2, 2], group=1))
    # every forward attribute is accepted, storage_order and count_include_pad included
    run_node("MaxPoolGrad", [np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2, 2), np.int64)],
             attrs=dict(kernel_shape=[2, 2], strides=[2, 2], storage_order=0, ceil_mode=0, dilations=[1, 1],
                        auto_pad="NOTSET", pads=[0, 0, 0, 0]))


# --------------------------------------------------------------------------- fast paths
# MaxPool(Grad) with kernel = stride = 2 along W (max_pool_k2: AVX-512 or AVX2 rows for
# float32, plain C for float64) and AveragePool(Grad) by rows (stride-1 taps, windows, pairs, spread) are
# checked against exact references: a window-by-window MaxPool in numpy, the general window
# loop of ext/pool.pyx, the adjoint identity <AveragePool(x), dy> = <x, AveragePoolGrad(dy)>,
# finite differences and PyTorch.
def reference_max_pool(x, kernel, stride):
    """MaxPool without padding or dilation, window by window: taps in row-major order, a tap
    wins when greater than the best so far or NaN; indices flattened over the whole tensor."""
    rank = len(kernel)
    out = tuple((s - k) // st + 1 for s, k, st in zip(x.shape[2:], kernel, stride))
    y = np.empty(x.shape[:2] + out, x.dtype)
    ind = np.empty(y.shape, np.int64)
    flat = x.reshape(-1)
    for pos in np.ndindex(*y.shape):
        start = [p * s for p, s in zip(pos[2:], stride)]
        best_k = -1
        for tap in np.ndindex(*kernel):
            k = np.ravel_multi_index(pos[:2] + tuple(a + t for a, t in zip(start, tap)), x.shape)
            if best_k < 0 or flat[k] > flat[best_k] or np.isnan(flat[k]):
                best_k = k
        y[pos], ind[pos] = flat[best_k], best_k
    assert rank == len(stride)
    return y, ind


K2_SHAPES = [  # (N, C, spatial...), kernel: rows of 1 to 40 outputs, odd sizes leave a tail
    ((2, 3, 9), (2,)),
    ((1, 2, 67), (2,)),
    ((2, 3, 6, 10), (2, 2)),
    ((1, 2, 7, 33), (2, 2)),
    ((2, 2, 5, 80), (2, 2)),
    ((2, 1, 4, 3), (2, 2)),
    ((1, 2, 5, 30), (1, 2)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,kernel", K2_SHAPES)
def test_max_pool_k2_matches_reference(shape, kernel, dtype, rng):
    # a few values: many ties (first maximum wins), some NaN (the last NaN of a window wins)
    x = rng.integers(-3, 3, shape).astype(dtype)
    x.reshape(-1)[rng.choice(x.size, x.size // 7, replace=False)] = np.nan
    attrs = dict(kernel_shape=list(kernel), strides=list(kernel))
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    ref_y, ref_ind = reference_max_pool(x, kernel, kernel)
    np.testing.assert_array_equal(y, ref_y)
    np.testing.assert_array_equal(indices, ref_ind)
    (y_only,) = run_node("MaxPool", [x], attrs=attrs, outputs=["Y"])
    np.testing.assert_array_equal(y_only, ref_y)
    # the general loop (column-major indices take it) agrees
    y_cm, ind_cm = run_node("MaxPool", [x], attrs={**attrs, "storage_order": 1})
    np.testing.assert_array_equal(y_cm, y)
    (dx_cm,) = run_node("MaxPoolGrad", [y, ind_cm], attrs={**attrs, "storage_order": 1}, output_shapes={"dX": shape})
    (dx,) = run_node("MaxPoolGrad", [y, indices], attrs=attrs, output_shapes={"dX": shape})
    expected = np.zeros(x.size, dtype)
    np.add.at(expected, ref_ind.reshape(-1), ref_y.reshape(-1))
    np.testing.assert_array_equal(dx.reshape(-1), expected)
    np.testing.assert_array_equal(dx_cm, dx)


CUT_K2_CASES = [  # (N, C, spatial...), kernel, attributes that cut the last window of an odd size
    ((2, 3, 15, 15), (2, 2), dict(ceil_mode=1)),
    ((1, 2, 7, 9), (1, 2), dict(ceil_mode=1)),
    ((2, 2, 9), (2,), dict(ceil_mode=1)),
    ((1, 3, 7, 34), (2, 2), dict(pads=[0, 0, 1, 0])),
    ((1, 2, 5, 5), (2, 2), dict(auto_pad="SAME_UPPER")),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,kernel,extra", CUT_K2_CASES)
def test_max_pool_k2_with_cut_windows_matches_reference(shape, kernel, extra, dtype, rng):
    """A last row or column of windows cut by the input's end (ceil_mode, padding after) is
    pooled over the taps inside: the reference pools the input padded with -inf."""
    x = rng.integers(-3, 3, shape).astype(dtype)
    x.reshape(-1)[rng.choice(x.size, x.size // 7, replace=False)] = np.nan
    attrs = dict(kernel_shape=list(kernel), strides=list(kernel), **extra)
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    padded_shape = shape[:2] + tuple(-(-s // k) * k for s, k in zip(shape[2:], kernel))
    padded = np.full(padded_shape, -np.inf, dtype)
    padded[tuple(slice(0, s) for s in shape)] = x
    ref_y, ref_ind = reference_max_pool(padded, kernel, kernel)
    np.testing.assert_array_equal(y, ref_y)
    np.testing.assert_array_equal(indices, np.ravel_multi_index(np.unravel_index(ref_ind, padded_shape), shape))
    (y_only,) = run_node("MaxPool", [x], attrs=attrs, outputs=["Y"])
    np.testing.assert_array_equal(y_only, ref_y)
    moved = indices.copy()      # the last (cut) window of the last plane points into its first window
    moved[-1, -1].flat[-1] = indices[-1, -1].flat[0]
    for ind in (indices, moved):
        (dx,) = run_node("MaxPoolGrad", [y, ind], attrs=attrs, output_shapes={"dX": shape})
        expected = np.zeros(x.size, dtype)
        np.add.at(expected, ind.reshape(-1), y.reshape(-1))
        np.testing.assert_array_equal(dx.reshape(-1), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_k2_threads_and_torch(dtype, threads, rng):
    torch = torch_or_skip()
    for shape in ((8, 16, 64, 66), (16, 32, 1030)):    # above the kernels' threading threshold
        x = rng.standard_normal(shape).astype(dtype)
        rank = len(shape) - 2
        attrs = dict(kernel_shape=[2] * rank, strides=[2] * rank)
        y, indices = run_node("MaxPool", [x], attrs=attrs)
        tx = torch.from_numpy(x).requires_grad_()
        ty, tind = torch_pool(torch, "max", tx, [2] * rank, [2] * rank, [0] * rank)
        np.testing.assert_array_equal(y, ty.detach().numpy())
        np.testing.assert_array_equal(indices, plane_to_global(tind.numpy(), int(np.prod(shape[2:]))))
        dy = rng.standard_normal(y.shape).astype(dtype)
        ty.backward(torch.from_numpy(dy))
        (dx,) = run_node("MaxPoolGrad", [dy, indices], attrs=attrs, output_shapes={"dX": shape})
        np.testing.assert_array_equal(dx, tx.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_grad_k2_indices_outside_their_window(dtype, threads, rng):
    """Indices inside the plane but not in their own window are still a scatter-add (the
    plane falls back to it); other planes keep the one-pass result."""
    x = rng.standard_normal((4, 32, 64, 66)).astype(dtype)     # threaded when asked
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    moved = indices.copy()
    moved[1, 2, 0, 0] = indices[1, 2, 5, 16]          # two windows send dY to one element
    moved[3, 7, 4, 9] = indices[3, 7, 0, 0] + 1       # a position no window chose
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,) = run_node("MaxPoolGrad", [dy, moved], attrs=attrs, output_shapes={"dX": x.shape})
    expected = np.zeros(x.size, dtype)
    np.add.at(expected, moved.reshape(-1), dy.reshape(-1))
    np.testing.assert_allclose(dx.reshape(-1), expected, rtol=1e-6)
    assert dx[1, 2].reshape(-1)[moved[1, 2, 0, 0] - 34 * 64 * 66] == pytest.approx(dy[1, 2, 0, 0] + dy[1, 2, 5, 16],
                                                                          rel=1e-6)


def general_average_pool(x, attrs):
    """AveragePool through the general window loop of ext/pool.pyx (the fast paths' reference)."""
    from minitrain._ext import pool as ext
    from minitrain.ops.pool_geometry import pool_geometry
    from minitrain.providers.cpu import pool as cpu

    def fail(message, error=errors.ShapeError):
        raise error(message)
    dims = cpu._as_3d(pool_geometry(attrs, x.shape[2:], fail))
    tables = [cpu._window_table(g) for g in dims]
    inv = [cpu._reciprocal_counts(g, t, attrs.get("count_include_pad", 0)) for g, t in zip(dims, tables)]
    y = np.empty(x.shape[:2] + tuple(g.out for g in dims[3 - (x.ndim - 2):]), x.dtype)
    planes = x.shape[0] * x.shape[1]
    ext.avg_pool(x.reshape(planes, -1), y.reshape(planes, -1), tuple(g.size for g in dims),
                 tuple(g.out for g in dims), tuple(g.dilation for g in dims), *tables, *inv, 1)
    return y


ROW_CASES = [  # spatial, kernel, stride, pad, ceil, dilation: the W axis picks the mode
    ((37,), (3,), (1,), (1,), False, 1),              # taps
    ((40,), (5,), (1,), (0,), False, 2),              # taps, dilated
    ((12, 40), (3, 3), (1, 1), (1, 1), False, 1),     # taps (the benchmark's 3x3 s1 p1)
    ((9, 20), (3, 4), (2, 1), (1, 2), True, 1),       # taps, strided along H
    ((5, 4, 18), (3, 2, 3), (1, 2, 1), (1, 0, 1), False, 1),   # taps over D and H rows
    ((11, 9), (3, 3), (1, 1), (1, 1), False, 1),      # narrow: windows
    ((64,), (64,), (64,), (0,), False, 1),            # one window per row (global style)
    ((10, 31), (3, 4), (2, 3), (1, 1), True, 1),      # windows, ceil mode
    ((8, 34), (2, 2), (2, 2), (0, 0), False, 1),      # pairs
    ((7, 35), (1, 2), (1, 2), (0, 0), False, 1),      # pairs, direct rows
    ((9, 30), (3, 3), (2, 3), (0, 0), True, 1),       # spread (gradient), partial last window
    ((6, 21), (2, 3), (2, 2), (1, 1), False, 2),      # neither: the general loop and scatter
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil,dilation", ROW_CASES)
def test_average_pool_rows_match_general_loop_and_adjoint(spatial, kernel, stride, pad, ceil, dilation,
                                                         count_include_pad, dtype, rng):
    x = rng.standard_normal((2, 3) + spatial).astype(dtype)
    attrs = onnx_attrs(kernel, stride, pad, ceil, dilation, count_include_pad=count_include_pad)
    (y,) = run_node("AveragePool", [x], attrs=attrs, opset=19)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(y, general_average_pool(x, attrs), **tol)
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": x.shape})
    # AveragePoolGrad is AveragePool's adjoint: <AveragePool(x), dy> = <x, AveragePoolGrad(dy)>
    lhs = np.vdot(y.astype(np.float64), dy.astype(np.float64))
    rhs = np.vdot(x.astype(np.float64), dx.astype(np.float64))
    assert lhs == pytest.approx(rhs, rel=1e-4 if dtype == np.float32 else 1e-12)
    # and every dX element is the sum over the windows that hold it
    if dtype == np.float64 and x.ndim == 4 and x.shape[2] * x.shape[3] <= 400:
        basis = np.zeros_like(x[:1, :1])
        for i in rng.choice(basis.size, 12, replace=False):
            basis.reshape(-1)[:] = 0
            basis.reshape(-1)[i] = 1
            (column,) = run_node("AveragePool", [basis], attrs=attrs, opset=19)
            assert dx[0, 0].reshape(-1)[i] == pytest.approx(np.vdot(column, dy[:1, :1]), rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil,dilation", ROW_CASES[::3] + ROW_CASES[8:11])
def test_average_pool_rows_gradcheck(spatial, kernel, stride, pad, ceil, dilation, rng):
    x = rng.standard_normal((1, 2) + spatial)
    gradcheck("AveragePool", [x], onnx_attrs(kernel, stride, pad, ceil, dilation, count_include_pad=1), opset=19)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_average_pool_rows_threads_and_torch(dtype, threads, rng):
    torch = torch_or_skip()
    # above the kernels' threading threshold: 3x3 s1 p1 (taps), a global-style window, 2x2 s2 (pairs)
    for shape, k, s, p in (((4, 16, 64, 66), 3, 1, 1), ((32, 64, 256), 256, 256, 0), ((8, 16, 64, 66), 2, 2, 0)):
        x = rng.standard_normal(shape).astype(dtype)
        rank = len(shape) - 2
        attrs = onnx_attrs((k,) * rank, (s,) * rank, (p,) * rank, count_include_pad=1)
        (y,) = run_node("AveragePool", [x], attrs=attrs)
        tx = torch.from_numpy(x).requires_grad_()
        ty = torch_pool(torch, "avg", tx, k, s, p)
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(y, ty.detach().numpy(), **tol)
        dy = rng.standard_normal(y.shape).astype(dtype)
        ty.backward(torch.from_numpy(dy))
        (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": shape})
        np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)


# --------------------------------------------------------------------------- an untouched D axis
# 3-D pooling that leaves a D axis of several slices alone (kernel 1, stride 1, no padding)
# takes the (H, W) fast paths with each D slice a plane of its own: max_pool_k2 (indices still
# over the whole tensor), window_sums for AveragePool(Grad); MaxPoolGrad scatters.
UNTOUCHED_D_MAX = [(1, 1, 2), (1, 2, 2)]
UNTOUCHED_D_AVG = [  # kernel, pads: window_sums' geometries
    ((1, 3, 3), (0, 1, 1, 0, 1, 1)),
    ((1, 1, 1), (0, 0, 0, 0, 0, 0)),
    ((1, 2, 3), (0, 0, 1, 0, 1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", UNTOUCHED_D_MAX)
def test_max_pool_with_untouched_depth_matches_general_loop_and_torch(kernel, dtype, threads, rng):
    shape = (2, 3, 4, 6, 17)          # odd W: a column no window covers; 8 windows a row
    x = distinct(rng, shape).astype(dtype)
    attrs = dict(kernel_shape=list(kernel), strides=list(kernel))
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    ref_y, ref_ind = reference_max_pool(x, kernel, kernel)
    np.testing.assert_array_equal(y, ref_y)
    np.testing.assert_array_equal(indices, ref_ind)
    y_cm, _ = run_node("MaxPool", [x], attrs={**attrs, "storage_order": 1})      # the general loop
    np.testing.assert_array_equal(y_cm, y)
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,) = run_node("MaxPoolGrad", [dy, indices], attrs=attrs, output_shapes={"dX": shape})
    expected = np.zeros(x.size, dtype)
    np.add.at(expected, ref_ind.reshape(-1), dy.reshape(-1))
    np.testing.assert_array_equal(dx.reshape(-1), expected)
    torch = pytest.importorskip("torch")
    tx = torch.from_numpy(x).requires_grad_()
    ty, tind = torch_pool(torch, "max", tx, kernel, kernel, [0, 0, 0])
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_array_equal(indices, plane_to_global(tind.numpy(), int(np.prod(shape[2:]))))
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_array_equal(dx, tx.grad.numpy())


@pytest.mark.parametrize("kernel", UNTOUCHED_D_MAX)
def test_max_pool_activation_grad_with_untouched_depth(kernel, rng):
    """The fused MaxPoolGrad + ReluGrad (fusion/max_pool_activation_grad.py) on these geometries
    equals the two unfused kernels."""
    x = np.maximum(distinct(rng, (2, 3, 4, 6, 16)), 0)
    attrs = dict(kernel_shape=list(kernel), strides=list(kernel))
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    dy = rng.standard_normal(y.shape)
    (pooled,) = run_node("MaxPoolGrad", [dy, indices], attrs=attrs, output_shapes={"dX": x.shape})
    (expected,) = run_node("ReluGrad", [pooled, x], domain=MS)
    dx, db = run_node("MaxPoolActivationGrad", [dy, x], attrs={"kernel_shape": list(kernel), "activation": "Relu"},
                      domain="ai.minitrain.fused")
    np.testing.assert_array_equal(dx, expected)
    np.testing.assert_allclose(db, expected.sum(axis=(0, 2, 3, 4)), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("kernel,pads", UNTOUCHED_D_AVG)
def test_average_pool_with_untouched_depth_matches_general_loop_and_torch(kernel, pads, count_include_pad, dtype,
                                                                         threads, rng):
    shape = (2, 3, 4, 5, 7)
    x = rng.standard_normal(shape).astype(dtype)
    attrs = dict(kernel_shape=list(kernel), pads=list(pads), count_include_pad=count_include_pad)
    (y,) = run_node("AveragePool", [x], attrs=attrs)
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(y, general_average_pool(x, attrs), **tol)
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,) = run_node("AveragePoolGrad", [dy], attrs=attrs, output_shapes={"dX": shape})
    lhs = np.vdot(y.astype(np.float64), dy.astype(np.float64))      # the adjoint identity
    rhs = np.vdot(x.astype(np.float64), dx.astype(np.float64))
    assert lhs == pytest.approx(rhs, rel=1e-4 if dtype == np.float32 else 1e-12)
    if pads[:3] != pads[3:]:
        return                      # PyTorch pads both ends alike
    torch = pytest.importorskip("torch")
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch_pool(torch, "avg", tx, kernel, [1, 1, 1], list(pads[:3]), count_include_pad=bool(count_include_pad))
    np.testing.assert_allclose(y, ty.detach().numpy(), **tol)
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)


def test_average_pool_with_untouched_depth_gradcheck(rng):
    gradcheck("AveragePool", [rng.standard_normal((1, 2, 3, 4, 5))],
              dict(kernel_shape=[1, 3, 3], pads=[0, 1, 1, 0, 1, 1], count_include_pad=0))
