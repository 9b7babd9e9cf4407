"""Pooling on CUDA against the CPU kernels: MaxPool (with Indices, storage_order, dilations,
ceil_mode, auto_pad), AveragePool (count_include_pad, ceil_mode, dilations from opset 19),
global pooling and every gradient, 1D/2D/3D, in three element types; the tiled MaxPoolGrad
(kernel = stride) with tails, foreign and out-of-plane indices; device inputs; bad input
raising the CPU's errors.  Every version and non-contiguous inputs: test_op_table.py."""
import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from minitrain import errors, run_node
from test_cuda_elementwise import assert_same_error

pytestmark = pytest.mark.cuda

MS = "com.microsoft"


def attrs_of(kernel, stride, pad, ceil=False, dilation=None, **extra):
    rank = len(kernel)
    attrs = dict(kernel_shape=list(kernel), strides=list(stride), pads=list(pad) * 2, ceil_mode=int(ceil), **extra)
    if dilation is not None:
        attrs["dilations"] = [dilation] * rank
    return attrs


def distinct(rng, shape):
    """Values without ties (float16 too), so that every provider picks the same maximum."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) / max(n, 1) * 8).reshape(shape)


MAX_CASES = [  # spatial, kernel, stride, pad, ceil, dilation (test_pool.py's, and tiled ones)
    ((9,), (3,), (2,), (1,), False, 1),
    ((10,), (2,), (3,), (0,), True, 2),
    ((7, 9), (3, 2), (2, 2), (1, 1), False, 1),
    ((8, 9), (3, 3), (2, 1), (1, 0), True, 1),
    ((9, 8), (2, 3), (2, 2), (1, 1), True, 2),
    ((5, 6, 7), (2, 3, 2), (2, 2, 1), (1, 1, 0), False, 1),
    ((6, 5, 7), (3, 2, 2), (2, 1, 3), (1, 0, 1), True, 1),
    ((12, 16), (2, 2), (2, 2), (0, 0), False, 1),       # tiles, pair stores
    ((7, 9), (2, 2), (2, 2), (0, 0), False, 1),         # tiles with a tail row and column
    ((5, 30), (1, 2), (1, 2), (0, 0), False, 1),        # tiles, kh = 1
    ((33,), (2,), (2,), (0,), False, 1),                # tiles, 1D with a tail
    ((6, 4, 8), (2, 2, 2), (2, 2, 2), (0, 0, 0), False, 1),
    ((9, 9), (3, 3), (3, 3), (0, 0), False, 1),         # tiles, k = 3
    ((7, 9), (2, 2), (2, 2), (0, 0), True, 1),          # ceil: partial windows, the scatter path
]


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil,dilation", MAX_CASES)
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_and_gradient(spatial, kernel, stride, pad, ceil, dilation, storage_order, dtype, rng):
    x = distinct(rng, (2, 3) + spatial)
    attrs = attrs_of(kernel, stride, pad, ceil, dilation, storage_order=storage_order)
    y, indices = check_parity("MaxPool", [x], attrs, dtypes=[dtype])
    check_parity("MaxPool", [x], attrs, outputs=["Y"], dtypes=[dtype])
    dy = rng.standard_normal(y.shape)
    check_parity("MaxPoolGrad", [dy, indices], attrs, output_shapes={"dX": x.shape}, dtypes=[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_ties_and_nan(dtype, rng):
    """The first maximum wins, a NaN wins and the later NaN over an earlier one."""
    x = rng.integers(-3, 3, (2, 3, 8, 10)).astype(np.float64)
    x.reshape(-1)[rng.choice(x.size, x.size // 7, replace=False)] = np.nan
    for attrs in (dict(kernel_shape=[2, 2], strides=[2, 2]), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])):
        y, indices = check_parity("MaxPool", [x], attrs, dtypes=[dtype])
        check_parity("MaxPoolGrad", [rng.standard_normal(y.shape), indices], attrs, dtypes=[dtype])
    check_parity("GlobalMaxPool", [x], dtypes=[dtype])
    check_parity("GlobalMaxPoolGrad", [rng.standard_normal((2, 3, 1, 1)), x], domain=MS, dtypes=[dtype])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_auto_pad(auto_pad, rng):
    x = distinct(rng, (1, 2, 7, 6))
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad=auto_pad)
    y, indices = check_parity("MaxPool", [x], attrs)
    check_parity("MaxPoolGrad", [rng.standard_normal(y.shape), indices], attrs, output_shapes={"dX": x.shape})
    for include_pad in (0, 1):
        a = {**attrs, "count_include_pad": include_pad}
        (y,) = check_parity("AveragePool", [x], a)
        check_parity("AveragePoolGrad", [rng.standard_normal(y.shape)], a, output_shapes={"dX": x.shape})


def test_attributes_a_version_lacks_raise_the_cpu_errors(rng):
    x = distinct(rng, (1, 1, 5, 5))
    base = dict(kernel_shape=[2, 2], strides=[2, 2])
    assert_same_error("MaxPool", [x], attrs=base, opset=7, outputs=["Y", "Indices"])
    assert_same_error("AveragePool", [x], attrs={**base, "count_include_pad": 1}, opset=6)
    assert_same_error("AveragePool", [x], attrs={**base, "dilations": [2, 2]}, opset=18)


AVG_CASES = [  # spatial, kernel, stride, pad, ceil, dilation
    ((9,), (3,), (2,), (1,), False, 1),
    ((9,), (4,), (1,), (2,), False, 1),
    ((5, 4, 6), (3, 2, 3), (1, 1, 1), (1, 1, 1), False, 1),
    ((4, 6, 5), (2, 5, 1), (1, 1, 1), (0, 2, 0), True, 1),
    ((10,), (4,), (3,), (2,), True, 1),
    ((7, 9), (3, 2), (2, 2), (1, 1), False, 1),
    ((8, 7), (3, 3), (2, 2), (1, 1), True, 1),
    ((12, 40), (3, 3), (1, 1), (1, 1), False, 1),
    ((8, 34), (2, 2), (2, 2), (0, 0), False, 1),
    ((9, 30), (3, 3), (2, 3), (0, 0), True, 1),
    ((6, 21), (2, 3), (2, 2), (1, 1), False, 2),
    ((9, 8), (2, 3), (1, 1), (1, 1), False, 2),
    ((5, 4, 6), (3, 2, 3), (2, 1, 2), (1, 0, 1), True, 1),
    ((3, 5, 7), (2, 3, 3), (1, 1, 2), (1, 0, 1), False, 1),
    ((256,), (256,), (256,), (0,), False, 1),            # one window over the plane: global kernels
    ((6, 5), (6, 5), (1, 1), (0, 0), False, 1),
    ((6, 5), (6, 5), (1, 1), (0, 0), True, 1),
]


@pytest.mark.parametrize("spatial,kernel,stride,pad,ceil,dilation", AVG_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_average_pool_and_gradient(spatial, kernel, stride, pad, ceil, dilation, count_include_pad, dtype, rng):
    x = rng.standard_normal((2, 3) + spatial)
    attrs = attrs_of(kernel, stride, pad, ceil, dilation, count_include_pad=count_include_pad)
    (y,) = check_parity("AveragePool", [x], attrs, opset=19, dtypes=[dtype])
    dy = rng.standard_normal(y.shape)
    check_parity("AveragePoolGrad", [dy], attrs, output_shapes={"dX": x.shape}, dtypes=[dtype])


def test_gradients_infer_the_smallest_dx_or_take_the_graphs(rng):
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    x7 = distinct(rng, (1, 2, 7, 7))
    y, indices = run_node("MaxPool", [x7], attrs=attrs)
    check_parity("MaxPoolGrad", [y, indices], attrs, output_shapes={"dX": x7.shape})
    check_parity("AveragePoolGrad", [y], attrs, output_shapes={"dX": x7.shape})
    check_parity("AveragePoolGrad", [y], attrs)
    check_parity("AveragePoolGrad", [y], {**attrs, "ceil_mode": 1})
    y6, indices6 = run_node("MaxPool", [x7[:, :, :6, :6]], attrs=attrs)
    check_parity("MaxPoolGrad", [y6, indices6], attrs)
    for wrong in ((1, 2, 9, 7), (1, 3, 7, 7), (1, 2, 7)):
        assert_same_error("AveragePoolGrad", [y], attrs=attrs, output_shapes={"dX": wrong})
        assert_same_error("MaxPoolGrad", [y, indices], attrs=attrs, output_shapes={"dX": wrong})


@pytest.mark.parametrize("shape,kernel", [((32, 64, 32, 32), (2, 2)), ((16, 32, 1030), (2,)),
                                          ((4, 8, 6, 10, 12), (2, 2, 2))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tiled_max_pool_grad_at_scale(shape, kernel, dtype, rng):
    """Many blocks: the benchmark's shape, a long 1D row and 3D."""
    x = rng.standard_normal(shape)
    attrs = dict(kernel_shape=list(kernel), strides=list(kernel))
    y, indices = check_parity("MaxPool", [x], attrs, dtypes=[dtype])
    check_parity("MaxPoolGrad", [rng.standard_normal(y.shape), indices], attrs, output_shapes={"dX": shape},
                 dtypes=[dtype])


@pytest.mark.parametrize("kernel,stride", [((2, 2), (2, 2)), ((3, 3), (2, 2))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_grad_indices_outside_their_window(kernel, stride, dtype, rng):
    """Indices inside their plane but not in their window are scatter-added as on the CPU."""
    x = rng.standard_normal((4, 32, 64, 66))
    attrs = dict(kernel_shape=list(kernel), strides=list(stride))
    _, indices = run_node("MaxPool", [x], attrs=attrs)
    moved = indices.copy()
    moved[1, 2, 0, 0] = indices[1, 2, 5, 16]          # two windows send dY to one element
    moved[3, 7, 4, 9] = indices[3, 7, 0, 0] + 1       # a position no window chose
    moved[0, 0, 3, 3] = indices[0, 0, 9, 9]
    dy = rng.integers(-4, 4, indices.shape).astype(np.float64)   # sums exact in every type
    check_parity("MaxPoolGrad", [dy, moved], attrs, output_shapes={"dX": x.shape}, dtypes=[dtype])


@pytest.mark.parametrize("kernel,stride", [((2, 2), (2, 2)), ((3, 3), (2, 2))])
def test_max_pool_grad_skips_indices_outside_their_plane(kernel, stride, rng):
    """The CPU raises for them; CUDA, which cannot without a host synchronisation, skips them
    and never writes out of bounds."""
    x = rng.standard_normal((2, 2, 8, 8))
    attrs = dict(kernel_shape=list(kernel), strides=list(stride))
    y, indices = run_node("MaxPool", [x], attrs=attrs)
    bad = indices.copy()
    bad[0, 0, 0, 0], bad[1, 1, 1, 1], bad[0, 1, 0, 1] = -1, 10 ** 12, 0    # 0 belongs to plane 0
    dy = rng.standard_normal(y.shape)
    (dx,) = run_node("MaxPoolGrad", [dy, bad], attrs=attrs, output_shapes={"dX": x.shape}, provider="cuda")
    keep = ((bad >= 0) & (bad // 64 == np.arange(4).reshape(2, 2, 1, 1))).reshape(-1)
    expected = np.zeros(x.size)
    np.add.at(expected, bad.reshape(-1)[keep], dy.reshape(-1)[keep])
    np.testing.assert_allclose(dx.reshape(-1), expected, rtol=1e-12)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 3, 4), (2, 3, 2, 3, 4), (64, 33, 256), (3, 2, 70, 70),
                                   (1, 1, 5000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_global_pooling_and_gradient(op, shape, dtype, rng):
    x = distinct(rng, shape)
    (y,) = check_parity(op, [x], dtypes=[dtype])
    dy = rng.standard_normal(y.shape)
    if op == "GlobalAveragePool":
        check_parity("GlobalAveragePoolGrad", [dy, np.array(shape, dtype=np.int64)], domain=MS, dtypes=[dtype])
    else:
        check_parity("GlobalMaxPoolGrad", [dy, x], domain=MS, dtypes=[dtype])


def test_device_inputs_give_device_outputs(rng):
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    x = distinct(rng, (2, 3, 8, 8)).astype(np.float32)
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    y, indices = run_node("MaxPool", [cuda.from_numpy(x)], attrs=attrs, provider="cuda")
    (dx,) = run_node("MaxPoolGrad", [y, indices], attrs=attrs, provider="cuda")
    (avg,) = run_node("AveragePool", [cuda.from_numpy(x)], attrs=attrs, provider="cuda")
    assert all(cuda.is_native(v) for v in (y, indices, dx, avg))
    cpu_y, cpu_indices = run_node("MaxPool", [x], attrs=attrs)
    np.testing.assert_array_equal(cuda.to_numpy(y), cpu_y)
    np.testing.assert_array_equal(cuda.to_numpy(indices), cpu_indices)
    np.testing.assert_array_equal(cuda.to_numpy(dx), run_node("MaxPoolGrad", [cpu_y, cpu_indices], attrs=attrs)[0])


BAD_ATTRS = [
    dict(kernel_shape=[9, 2]),
    dict(kernel_shape=[2, 2], pads=[-1, 0, 0, 0]),
    dict(kernel_shape=[2, 2], pads=[1, 1]),
    dict(kernel_shape=[2, 2], strides=[0, 1]),
    dict(kernel_shape=[2, 2], dilations=[1, 0]),
    dict(kernel_shape=[2]),
    dict(kernel_shape=[2, 2], pads=[3, 0, 0, 0]),
    dict(kernel_shape=[2, 2], auto_pad="SAME"),
    dict(kernel_shape=[2, 2], auto_pad="VALID", pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 2], ceil_mode=2),
]


@pytest.mark.parametrize("attrs", BAD_ATTRS)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_bad_attributes_raise_the_cpu_errors(op, attrs):
    assert_same_error(op, [np.zeros((1, 1, 5, 5), np.float32)], attrs=attrs)


def test_bad_input_raises_the_cpu_errors(rng):
    x = np.zeros((1, 1, 5, 5), np.float32)
    assert_same_error("MaxPool", [x])
    assert_same_error("AveragePool", [x.reshape(5, 5)], attrs=dict(kernel_shape=[2, 2]))
    assert_same_error("GlobalMaxPool", [np.zeros((1, 1, 2, 2, 2, 2), np.float32)])
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    y, indices = run_node("MaxPool", [rng.standard_normal((2, 2, 4, 4))], attrs=attrs)
    assert_same_error("MaxPoolGrad", [y, indices[:, :, :1]], attrs=attrs)
    assert_same_error("MaxPoolGrad", [y, indices.astype(np.int32)], attrs=attrs)
    assert_same_error("AveragePoolGrad", [y], attrs={**attrs, "group": 1})
    assert_same_error("GlobalAveragePoolGrad", [np.ones((1, 2, 1, 1)), np.array([1, 3, 2, 2])], domain=MS)
    assert_same_error("GlobalMaxPoolGrad", [np.ones((1, 2, 1)), np.ones((1, 2, 3, 3))], domain=MS)
    with pytest.raises(errors.DTypeError):
        run_node("AveragePool", [np.zeros((1, 1, 4, 4), np.int64)], attrs=attrs, provider="cuda")
