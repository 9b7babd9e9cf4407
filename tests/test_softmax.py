"""Softmax / LogSoftmax in both ONNX forms (opsets 1-12 coerce to 2-D at `axis`, 13+ use one
axis) and SoftmaxGrad / LogSoftmaxGrad with their _13 variants: values, stability, both kernel
layouts (contiguous rows and strided axes) on sizes that take the threaded and pipelined rows,
stability, PyTorch, errors, and the streaming-store path of contiguous rows (ext/stream.h)
against the plain one.  Finite differences and the default axes: the op table (op_table.py)."""
import numpy as np
import pytest

from minitrain import errors, registered_kernels, run_node
from minitrain._ext import softmax as _sm
from minitrain.providers.cpu import softmax as cpu_softmax
from minitrain.providers.cpu import streaming

MS = "com.microsoft"


def reference(x, axis, log, coerce):
    shape = x.shape
    if coerce:
        axis = axis % x.ndim
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    m = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(m).sum(axis=axis, keepdims=True))
    return (m - lse if log else np.exp(m - lse)).reshape(shape)


def reference_grad(dy, y, axis, log, coerce):
    shape = dy.shape
    if coerce:
        axis = axis % dy.ndim
        dy, y = dy.reshape(int(np.prod(shape[:axis])), -1), y.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    if log:
        dx = dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)
    else:
        dx = y * (dy - (y * dy).sum(axis=axis, keepdims=True))
    return dx.reshape(shape)


SHAPES_AXES = [((7,), 0), ((5, 130), -1), ((5, 130), 0), ((3, 4, 70), 1), ((2, 3, 4, 67), 2),
               ((3, 100, 2), 0), ((2, 3, 5), -3),
               ((40, 1000), -1), ((12, 3000), 1)]      # threaded, pipelined rows; LogSoftmax rows > 2048


@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_and_gradient_values(shape, axis, op, opset, dtype, rng):
    log, coerce = op == "LogSoftmax", opset < 13
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    (y,) = run_node(op, [x], attrs={"axis": axis}, opset=opset)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, reference(x.astype(np.float64), axis, log, coerce), rtol=tol, atol=tol)
    dy = rng.standard_normal(shape).astype(dtype)
    grad_op = f"{op}Grad" + ("" if coerce else "_13")
    (dx,) = run_node(grad_op, [dy, y], attrs={"axis": axis}, domain=MS)
    expected = reference_grad(dy.astype(np.float64), y.astype(np.float64), axis, log, coerce)
    np.testing.assert_allclose(dx, expected, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1])
def test_stable_for_huge_inputs(op, dtype, axis):
    x = np.array([[1e4, 1e4 - 1, -1e4, 0.0], [-3e4, -3e4, -3e4, -3e4], [800, 0, -800, 1e30]], dtype=dtype)
    x = x if axis == 1 else x.T.copy()
    (y,) = run_node(op, [x], attrs={"axis": axis})
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, reference(x.astype(np.float64), axis, op == "LogSoftmax", False),
                               rtol=1e-6, atol=1e-30 if op == "Softmax" else 1e-3)


def test_both_gradient_versions_are_registered():
    for op in ("SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"):
        kernels = registered_kernels(op, MS)
        assert kernels and all(k.since_version == 1 for k in kernels)
    ranges = {(k.since_version, k.end_version) for k in registered_kernels("Softmax", "")}
    assert ranges == {(1, 12), (13, None)}


def test_against_torch(rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((3, 6, 5))
    dy = rng.standard_normal(x.shape)
    for op, fn in (("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)):
        for axis in (0, 1, 2):
            tx = torch.from_numpy(x).requires_grad_()
            ty = fn(tx, axis)
            ty.backward(torch.from_numpy(dy))
            (y,) = run_node(op, [x], attrs={"axis": axis}, opset=13)
            (dx,) = run_node(f"{op}Grad_13", [dy, y], attrs={"axis": axis}, domain=MS)
            np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("op,domain", [("Softmax", ""), ("LogSoftmax", ""), ("SoftmaxGrad", MS),
                                       ("SoftmaxGrad_13", MS), ("LogSoftmaxGrad_13", MS)])
def test_axis_out_of_range(op, domain):
    inputs = [np.zeros((2, 3))] * (2 if domain else 1)
    with pytest.raises(errors.OpAttributeError, match="axis"):
        run_node(op, inputs, attrs={"axis": 2}, domain=domain)
    with pytest.raises(errors.OpAttributeError, match="axis"):
        run_node(op, inputs, attrs={"axis": -3}, domain=domain)


def test_bad_input():
    with pytest.raises(errors.ShapeError, match="same shape"):
        run_node("SoftmaxGrad_13", [np.zeros((2, 3)), np.zeros((3, 2))], domain=MS)
    with pytest.raises(errors.DTypeError):
        run_node("Softmax", [np.zeros((2, 3), dtype=np.int32)])
    with pytest.raises(errors.KernelNotFoundError, match="float16"):
        run_node("LogSoftmax", [np.zeros((2, 3), dtype=np.float16)])


def test_empty_and_non_contiguous(rng):
    (y,) = run_node("Softmax", [np.zeros((0, 4))])
    assert y.shape == (0, 4)
    x = rng.standard_normal((4, 10))[:, ::3]
    (y,) = run_node("LogSoftmax", [x], attrs={"axis": 0})
    np.testing.assert_allclose(y, reference(x, 0, True, False), rtol=1e-12)


def misaligned(n, dtype, offset):
    """A length-n view starting `offset` elements past a 64-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset * itemsize
    return raw[start:start + n * itemsize].view(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,n", [(1, 7), (3, 37), (5, 1031), (70, 1000), (2, 5000)])
def test_streamed_rows_match_the_plain_ones(dtype, rows, n, rng):
    """Rows of every length, at every offset from a cache line: bitwise equal (LogSoftmaxGrad
    rows longer than the exps' stack buffer, 2048, ignore the flag)."""
    x = (rng.standard_normal(rows * n) * 3).astype(dtype)
    dy = rng.standard_normal(rows * n).astype(dtype)
    lanes = 64 // np.dtype(dtype).itemsize
    for log in (False, True):
        y = np.empty_like(x)
        _sm.softmax(x, y, rows, n, 1, log, 2)
        plain = np.empty_like(x)
        _sm.softmax_grad(dy, y, plain, rows, n, 1, log, 2, False)
        for offset in range(lanes):
            out = misaligned(rows * n, dtype, offset)
            out[:] = np.nan
            _sm.softmax_grad(dy, y, out, rows, n, 1, log, 2, True)
            np.testing.assert_array_equal(out.view(np.uint8), plain.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,n", [(1000, 37), (40, 1000), (13, 3000), (2, 20000)])
def test_gradient_rows_same_bits_at_any_thread_count(dtype, rows, n, rng):
    """Each thread pipelines a block of rows (a row's last pass with the next row's sums); the
    first row of a block sums alone.  Either way a row's sum is the same: bitwise equal at 1,
    2 and 3 threads (2 rows at 3 threads: an empty block), streamed or not."""
    x = (rng.standard_normal(rows * n) * 3).astype(dtype)
    dy = rng.standard_normal(rows * n).astype(dtype)
    for log in (False, True):
        y = np.empty_like(x)
        _sm.softmax(x, y, rows, n, 1, log, 1)
        results = []
        for threads, stream in ((1, False), (2, False), (3, False), (2, True)):
            out = np.full_like(x, np.nan)
            _sm.softmax_grad(dy, y, out, rows, n, 1, log, threads, stream)
            results.append(out)
        for out in results[1:]:
            np.testing.assert_array_equal(out.view(np.uint8), results[0].view(np.uint8))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_provider_streams_above_the_threshold(op, monkeypatch, rng):
    """SoftmaxGrad and LogSoftmaxGrad get stream=False for small tensors and True above the
    threshold (here 0), with the plain path's result."""
    calls = []

    def softmax_grad(*args):
        calls.append(args[-1])
        _sm.softmax_grad(*args)

    y = run_node(op, [rng.standard_normal((6, 300))], attrs={"axis": -1})[0]
    dy = rng.standard_normal(y.shape)
    monkeypatch.setattr(cpu_softmax, "_sm", type("Recorder", (), {"softmax_grad": staticmethod(softmax_grad)}))
    (dx,) = run_node(f"{op}Grad_13", [dy, y], attrs={"axis": -1}, domain=MS)
    streaming.set_stream_threshold(0)
    try:
        (dx_streamed,) = run_node(f"{op}Grad_13", [dy, y], attrs={"axis": -1}, domain=MS)
    finally:
        streaming.set_stream_threshold(None)
    assert calls == [False, True]
    np.testing.assert_array_equal(dx_streamed, dx)


@pytest.mark.parametrize("n", [5, 13, 31, 1000])
def test_float32_exp_is_accurate_in_loop_bodies_and_tails(n, rng):
    """Rows whose maximum is 0 and the rest far below: every output is exp(x) to float32
    precision, so its error is the exp's, at every position of the vectorised loop and its
    tail (an exp whose two-step range reduction -ffast-math merged was 64 ulp off there)."""
    x = rng.uniform(-85, -1, (256, n)).astype(np.float32)
    x[:, 0] = 0
    (y,) = run_node("Softmax", [x], attrs={"axis": -1})
    e = np.exp(x.astype(np.float64))
    expected = e / e.sum(-1, keepdims=True)
    assert np.max(np.abs(y - expected) / expected) < 16 * 2.0 ** -24
