"""The Cython kernels behind Resize / ResizeGrad, the per-sample normalisations, SumToShape,
Where, Erf and Clip on the CPU, beyond their op-table rows: shapes large enough for the threaded paths
(one thread and two), every layout form the kernels special-case, against NumPy references
written out here; and the kernels' own checks of their buffers."""
import numpy as np
import pytest
from scipy.special import erf as scipy_erf

from minitrain import run_node
from minitrain._ext import resize as resize_kernels
from minitrain._ext import sample_normalization as norm_kernels
from minitrain._ext import sum_to_shape as sum_kernels
from minitrain._ext import where as where_kernels
from minitrain.providers.cpu.elementwise import middle_layout

MS = "com.microsoft"
TOLERANCE = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


# ------------------------------------------------------------------ Resize
def _source(out, size, scale):
    """half_pixel source coordinates, as ops/resize.py computes them."""
    return (np.arange(out) + 0.5) / scale - 0.5


def _resize_reference(x, axis, out, mode):
    """One axis resized by NumPy (half_pixel coordinates, round_prefer_floor): (y, the maps)."""
    size = x.shape[axis]
    coordinate = _source(out, size, out / size)
    if mode == "nearest":
        pos = np.clip(np.ceil(coordinate - 0.5), 0, size - 1).astype(np.int64)
        return np.take(x, pos, axis=axis), (pos,)
    c = np.clip(coordinate, 0, size - 1)
    left = np.floor(c).astype(np.int64)
    right = np.minimum(left + 1, size - 1)
    w = c - left
    shape = [1] * x.ndim
    shape[axis] = -1
    y = np.take(x, left, axis=axis) * (1 - w.reshape(shape)) + np.take(x, right, axis=axis) * w.reshape(shape)
    return y, (left, right, w)


def _resize_grad_reference(dy, axis, size, maps):
    rows = np.moveaxis(dy, axis, 0)
    folded = np.zeros((size,) + rows.shape[1:])
    if len(maps) == 1:
        np.add.at(folded, maps[0], rows)
    else:
        left, right, w = maps
        w = w.reshape((-1,) + (1,) * (rows.ndim - 1))
        np.add.at(folded, left, rows * (1 - w))
        np.add.at(folded, right, rows * w)
    return np.moveaxis(folded, 0, axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("shape,axis,out", [((8, 6, 20, 24), 3, 48), ((8, 6, 20, 24), 2, 13), ((5, 40, 30), 0, 11)],
                         ids=["last-axis-up", "middle-axis-down", "first-axis"])
def test_resize_axis_kernels_match_numpy(shape, axis, out, mode, dtype, threads, rng):
    x = rng.standard_normal(shape)
    y_ref, maps = _resize_reference(x, axis, out, mode)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    typed = [m if m.dtype == np.int64 else m.astype(dtype) for m in maps]
    y = np.empty(y_ref.shape, dtype)
    forward = resize_kernels.nearest if mode == "nearest" else resize_kernels.linear
    forward(x.astype(dtype).reshape(-1), y.reshape(-1), outer, shape[axis], out, inner, *typed, threads)
    np.testing.assert_allclose(y, y_ref, **TOLERANCE[dtype])

    dy = rng.standard_normal(y_ref.shape)
    dx = np.full(shape, np.nan, dtype)            # the kernel clears what no output position feeds
    backward = resize_kernels.nearest_grad if mode == "nearest" else resize_kernels.linear_grad
    backward(dy.astype(dtype).reshape(-1), dx.reshape(-1), outer, shape[axis], out, inner, *typed, threads)
    np.testing.assert_allclose(dx, _resize_grad_reference(dy, axis, shape[axis], maps), **TOLERANCE[dtype])


def test_resize_kernel_rejects_positions_outside_the_axis():
    x, y = np.zeros(6, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ValueError, match=r"pos\[2\] = 3 is outside \[0, 3\)"):
        resize_kernels.nearest(x, y, 2, 3, 4, 1, np.array([0, 2, 3, 1], np.int64), 1)
    with pytest.raises(ValueError, match="does not match"):
        resize_kernels.linear_grad(np.zeros(8), np.zeros(5), 2, 3, 4, 1, np.zeros(4, np.int64),
                                   np.zeros(4, np.int64), np.zeros(4), 1)


def test_bilinear_resize_gradient_of_a_unet_sized_map_against_torch(rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((16, 6, 16, 16)).astype(np.float32)
    dy = rng.standard_normal((16, 6, 32, 32)).astype(np.float32)
    attrs = {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}
    scales = np.array([1.0, 1.0, 2.0, 2.0], np.float32)
    y = run_node("Resize", [x, None, scales], attrs=attrs)[0]
    dx = run_node("ResizeGrad", [dy, x, None, scales], attrs=attrs, domain=MS)[0]
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.interpolate(tx, scale_factor=2, mode="bilinear", align_corners=False)
    ty.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_gradient_along_the_last_axis_matches_numpy_with_and_without_infinities(mode, rng):
    """The last axis's gradient runs as a matrix product for finite dY; an infinity takes the
    kernel, so that it stays in the entries its output position feeds."""
    attrs = {"mode": mode, "coordinate_transformation_mode": "half_pixel"}
    scales = np.array([1.0, 1.0, 1.0, 2.5])
    x = rng.standard_normal((2, 3, 4, 6))
    dy = rng.standard_normal((2, 3, 4, 15))
    _, maps = _resize_reference(x, 3, 15, mode)
    for special in (None, np.inf):
        if special is not None:
            dy[0, 0, 0, 7] = special
        dx = run_node("ResizeGrad", [dy, x, None, scales], attrs=attrs, domain=MS)[0]
        want = _resize_grad_reference(dy, 3, 6, maps)
        np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-12)
        assert np.isnan(dx).sum() == np.isnan(want).sum() == 0


# ------------------------------------------------------------------ per-sample normalisations
def _normalization_reference(x, scale, bias, epsilon, period, stride):
    rows, cols = x.shape
    index = ((np.arange(rows)[:, None] % period) * cols + np.arange(cols)[None, :]) // stride
    mean = x.mean(axis=1, keepdims=True)
    inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + epsilon)
    n = (x - mean) * inv
    return n * scale[index] + (0 if bias is None else bias[index]), mean[:, 0], inv[:, 0], n, index


# (rows, cols, period, stride): LayerNormalization over a short and a long row, InstanceNormalization,
# GroupNormalization with a scale per channel and per group; enough rows for two threads
LAYOUTS = [(4096, 8, 1, 1), (64, 700, 1, 1), (48 * 4, 200, 48, 200), (16 * 4, 600, 4, 200), (16 * 4, 600, 4, 600)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,cols,period,stride", LAYOUTS, ids=["ln-short", "ln-long", "instance", "group-channel",
                                                                  "group"])
def test_normalization_kernels_match_numpy(rows, cols, period, stride, dtype, threads, rng):
    params = period * cols // stride
    x = rng.standard_normal((rows, cols)) * 3 + 1
    scale, bias, dy = rng.standard_normal(params), rng.standard_normal(params), rng.standard_normal((rows, cols))
    y_ref, mean_ref, inv_ref, n, index = _normalization_reference(x, scale, bias, 1e-5, period, stride)
    cast = [a.astype(dtype).reshape(-1) for a in (x, scale, bias, dy)]
    y, mean, inv = np.empty(rows * cols, dtype), np.empty(rows, dtype), np.empty(rows, dtype)
    norm_kernels.forward(cast[0], cast[1], cast[2], y, mean, inv, rows, cols, period, stride, 1e-5, threads)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else TOLERANCE[dtype]
    for got, want in ((y, y_ref), (mean, mean_ref), (inv, inv_ref)):
        np.testing.assert_allclose(got.reshape(want.shape), want, **tol)

    g = dy * scale[index]
    dx_ref = inv_ref[:, None] * (g - g.mean(axis=1, keepdims=True) - n * (g * n).mean(axis=1, keepdims=True))
    dscale_ref = np.bincount(index.reshape(-1), (dy * n).reshape(-1), minlength=params)
    dbias_ref = np.bincount(index.reshape(-1), dy.reshape(-1), minlength=params)
    dx, dscale, dbias = np.empty(rows * cols, dtype), np.empty(params, dtype), np.empty(params, dtype)
    norm_kernels.backward(cast[3], cast[0], cast[1], mean, inv, dx, dscale, dbias, rows, cols, period, stride, threads)
    np.testing.assert_allclose(dx.reshape(rows, cols), dx_ref, **tol)
    np.testing.assert_allclose(dscale, dscale_ref, rtol=tol["rtol"], atol=tol["atol"] * rows)
    np.testing.assert_allclose(dbias, dbias_ref, rtol=tol["rtol"], atol=tol["atol"] * rows)

    only_dx = np.empty(rows * cols, dtype)
    norm_kernels.backward(cast[3], cast[0], cast[1], mean, inv, only_dx, None, None, rows, cols, period, stride,
                          threads)
    np.testing.assert_array_equal(only_dx, dx)


def test_normalization_kernel_rejects_a_layout_that_does_not_fit():
    x = np.zeros(12, np.float32)
    with pytest.raises(ValueError, match="does not fit 12 elements and 3 affine entries"):
        norm_kernels.forward(x, np.ones(3, np.float32), None, np.empty(12, np.float32), np.empty(3, np.float32),
                             np.empty(3, np.float32), 3, 4, 1, 1, 1e-5, 1)


def test_layer_norm_without_bias_and_non_contiguous_input(rng):
    x = rng.standard_normal((6, 10, 4)).astype(np.float32).transpose(1, 0, 2)
    scale = rng.standard_normal(4).astype(np.float32)
    y = run_node("LayerNormalization", [x, scale], attrs={"axis": -1}, outputs=["Y"])[0]
    ref = _normalization_reference(x.reshape(-1, 4).astype(np.float64), scale.astype(np.float64), None, 1e-5, 1, 1)[0]
    np.testing.assert_allclose(y.reshape(-1, 4), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ SumToShape
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape,shape", [((16, 16, 16, 8), (8,)), ((16, 16, 16, 16), (16, 1, 1)),
                                           ((64, 9, 1, 300), (9, 1, 1)), ((7, 5000), (7, 1)), ((3, 4), (1,)),
                                           ((40, 1, 30, 50), (1, 30, 1)), ((4, 5, 6), (4, 1, 6)),
                                           ((2, 3), (2, 3)), ((5, 3000), ())],
                         ids=["trailing-bias", "channel-bias", "channel-size1", "row-sums", "all", "middle",
                              "kept-summed-kept", "nothing", "scalar"])
def test_sum_to_shape_matches_numpy(x_shape, shape, dtype, threads, rng):
    x = rng.standard_normal(x_shape)
    got = run_node("SumToShape", [x.astype(dtype), np.array(shape, np.int64)], domain=MS)[0]
    lead = len(x_shape) - len(shape)
    want = x.sum(axis=tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and
                                                     x_shape[lead + i] != 1), keepdims=False).reshape(shape)
    assert got.shape == tuple(shape) and got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype]["rtol"], atol=TOLERANCE[dtype]["atol"] * x.size)


def test_sum_to_shape_of_a_transposed_view(rng):
    x = rng.standard_normal((8, 6, 5)).transpose(2, 0, 1)
    got = run_node("SumToShape", [x, np.array([8, 1], np.int64)], domain=MS)[0]
    np.testing.assert_allclose(got, x.sum(axis=(0, 2)).reshape(8, 1), rtol=1e-12)


def test_middle_layout():
    assert middle_layout((16, 16, 16, 8), (0, 1, 2)) == (4096, 8, 1)
    assert middle_layout((16, 8, 1, 4, 4), (0, 3, 4)) == (16, 8, 16)
    assert middle_layout((4, 5, 6), (1,)) is None
    assert middle_layout((4, 5), (0, 1)) == (20, 1, 1)


def test_sum_kernel_rejects_a_layout_that_does_not_fit():
    with pytest.raises(ValueError, match=r"layout \(2, 3, 4\) does not match buffers of 20 and 3"):
        sum_kernels.middle_sums(np.zeros(20), np.zeros(3), 2, 3, 4, 1)


# ------------------------------------------------------------------ Where
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_form,y_form", [("full", "full"), ("scalar", "full"), ("full", "scalar"),
                                           ("scalar", "scalar"), ("one", "full")])
def test_where_matches_numpy(x_form, y_form, dtype, threads, rng):
    shape = (16, 24, 20, 9)
    condition = rng.random(shape) < 0.4
    forms = {"full": lambda: rng.standard_normal(shape), "scalar": lambda: np.array(rng.standard_normal()),
             "one": lambda: rng.standard_normal((1, 1, 1))}
    x, y = (forms[f]().astype(dtype) for f in (x_form, y_form))
    for side in (x, y):                 # special values pass through unchanged
        side.reshape(-1)[:3] = [np.nan, np.inf, -np.inf][:side.size]
    got = run_node("Where", [condition, x, y])[0]
    np.testing.assert_array_equal(got, np.where(condition, x, y))
    assert got.dtype == dtype


def test_where_broadcasting_condition_and_views(rng):
    condition = rng.random((5, 1)) < 0.5
    x, y = rng.standard_normal((5, 6)).T.copy().T, rng.standard_normal((6,))
    np.testing.assert_array_equal(run_node("Where", [condition, x, y])[0], np.where(condition, x, y))
    full = rng.random((6, 5)) < 0.5
    np.testing.assert_array_equal(run_node("Where", [full.T, x, np.float64(2.0) * np.ones(1)])[0],
                                  np.where(full.T, x, 2.0))


def test_where_kernel_rejects_mismatched_buffers():
    with pytest.raises(ValueError, match="buffers of 4, 3, 1 and 4 elements"):
        where_kernels.where(np.zeros(4, np.uint8), np.zeros(3), np.zeros(1), np.zeros(4), 1)


# ------------------------------------------------------------------ Erf
@pytest.mark.parametrize("dtype,atol", [(np.float32, 5e-7), (np.float64, 1e-15)])
def test_erf_kernel_against_scipy(dtype, atol, threads):
    x = np.concatenate([np.linspace(-7, 7, 100003), [0.0, -0.0, np.inf, -np.inf, 1e-30]]).astype(dtype)
    got = run_node("Erf", [x])[0]
    assert got.dtype == dtype
    np.testing.assert_allclose(got, scipy_erf(x.astype(np.float64)), rtol=0, atol=atol)
    assert np.isnan(run_node("Erf", [np.array([np.nan], dtype)])[0]).all()
    assert run_node("Erf", [np.array(0.5, dtype)])[0].shape == ()


# ------------------------------------------------------------------ Clip
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("low,high", [(0.0, 6.0), (-0.5, None), (None, 0.2), (None, None), (0.5, -0.5),
                                      (-np.inf, np.inf)])
def test_clip_kernel_matches_numpy(low, high, dtype, threads, rng):
    x = (rng.standard_normal((16, 24, 20, 9)) * 4).astype(dtype).transpose(0, 2, 1, 3)
    x[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    bounds = [None if b is None else np.array(b, dtype) for b in (low, high)]
    got = run_node("Clip", [x, *bounds])[0]
    want = np.minimum(np.maximum(x, -np.inf if low is None else dtype(low)), np.inf if high is None else dtype(high))
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, want)
